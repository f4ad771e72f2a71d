"""scripts/kernel_timeline.py on a hand-built trace whose breakdown is known: overlapping
kernels (an early start under programmatic dependent launch), a gap with nothing running, and
the columns adding up to the step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "kernel_timeline.py"

HEADER = "correlation,call,start_ns,end_ns,stream,grid,block,kernel\n"


def run(tmp_path: Path, rows: list[tuple[int, int, str]], steps: int) -> str:
    csv = tmp_path / "t.csv"
    csv.write_text(HEADER + "".join(
        f'1,cudaGraphLaunch,{s},{e},7,132,128,"{name}"\n' for s, e, name in rows))
    out = subprocess.run([sys.executable, str(SCRIPT), str(csv), "--steps", str(steps)],
                         capture_output=True, text=True, check=True)
    return out.stdout


def table(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `") or line.startswith("| (no"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_exposed_and_idle_add_up_to_the_step(tmp_path: Path) -> None:
    # norm 0-2 us; matvec starts early at 1 us (waits), ends at 10; a 3 us gap with nothing
    # running; attention 13-15; a second matvec 14-20.
    rows = [
        (0, 2000, "llamaserve::cuda::(anonymous namespace)::rmsnorm_kernel<0>(RmsNormArgs)"),
        (1000, 10000, "void llamaserve::cuda::matvec_kernel<12, 1, 4, 1, 1>(MatvecLaunch)"),
        (13000, 15000, "attention_decode_kernel<128, 1, 16>(AttentionArgs)"),
        (14000, 20000, "void llamaserve::cuda::matvec_kernel<12, 1, 4, 1, 1>(MatvecLaunch)"),
    ]
    t = table(run(tmp_path, rows, steps=1))
    assert t["rmsnorm_kernel<0>"][:2] == ["1", "2.0"]
    # 8 us past the norm's end, then 5 us past the attention's.
    assert t["void matvec_kernel<12, 1, 4, 1, 1>"][:2] == ["2", "13.0"]
    assert t["void matvec_kernel<12, 1, 4, 1, 1>"][3] == "7.50"  # (9 + 6) / 2 us a launch
    assert t["attention_decode_kernel<128, 1, 16>"][1] == "2.0"
    assert t["(no kernel running)"][1] == "3.0"
    exposed = sum(float(v[1]) for v in t.values())
    assert exposed == 20.0


def test_per_step_figures_divide_by_the_steps(tmp_path: Path) -> None:
    rows = [(0, 4000, "k(A)"), (4000, 8000, "k(A)")]
    text = run(tmp_path, rows, steps=2)
    assert "traced step 4.0 us" in text
    assert table(text)["k"][:2] == ["1", "4.0"]


def test_against_a_baseline_lists_both_sides(tmp_path: Path) -> None:
    base, new = tmp_path / "base.csv", tmp_path / "new.csv"
    base.write_text(HEADER + '1,l,0,4000,7,1,1,"norm(A)"\n1,l,3000,10000,7,1,1,"mv(A)"\n')
    new.write_text(HEADER + '1,l,0,2000,7,1,1,"slices(A)"\n1,l,1000,8000,7,1,1,"mv(A)"\n')
    out = subprocess.run([sys.executable, str(SCRIPT), str(new), "--steps", "1", "--against",
                          str(base)], capture_output=True, text=True, check=True).stdout
    t = table(out)
    assert t["norm"] == ["1 / -", "4.0", "", "-4.0"]
    assert t["slices"] == ["- / 1", "", "2.0", "+2.0"]
    assert t["mv"] == ["1 / 1", "6.0", "6.0", "+0.0"]
    assert "kernels' span 10.0 -> 8.0 us" in out
