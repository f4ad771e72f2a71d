"""scripts/ncu_source_stalls.py on a hand-built source page whose breakdown is known: two
kernels, spans of instructions by execution count, reasons summed over instructions, and the
instructions with the most samples."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "ncu_source_stalls.py"

COLUMNS = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
           "stall_long_sb", "stall_wait", "stall_long_sb (Not Issued)"]


def page(kernels: list[tuple[str, list[tuple[str, int, int, int, int]]]]) -> str:
    lines = []
    for name, rows in kernels:
        lines.append(f'"Kernel Name","{name}",')
        lines.append(",".join(f'"{c}"' for c in COLUMNS))
        for i, (source, samples, executed, long_sb, wait) in enumerate(rows):
            lines.append(f'"0x{0x1000 + 16 * i:x}","{source}","{samples}","{executed}",'
                         f'"{long_sb}","{wait}","{long_sb}"')
    return "\n".join(lines) + "\n"


def run(tmp_path: Path, text: str, *args: str, name: str = "p.csv") -> subprocess.CompletedProcess:
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return subprocess.run([sys.executable, str(SCRIPT), str(path), *args], capture_output=True,
                          text=True)


KERNEL_A = ("kernel_a", [
    ("LDG.E R2, [R4]", 10, 4, 0, 10),       # prologue, once a warp
    ("FMUL R2, R2, R3", 30, 4, 30, 0),      # waits for the load
    ("LDS R5, [R6]", 5, 16, 0, 5),           # loop body, 16 a warp
    ("HMMA R8, R2, R5, R8", 50, 16, 40, 10),
    ("EXIT", 5, 4, 0, 5),                    # end
])


def test_spans_reasons_and_top_instructions(tmp_path: Path) -> None:
    out = run(tmp_path, page([KERNEL_A]), "--top", "2")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "5 instructions, 100 samples; by reason: long_sb 70.0%, wait 30.0%" in text
    # Spans of equal execution counts: 0-1 (4), 2-3 (16), 4 (4).
    assert "| 0-1 | 4 | 40.0% |" in text
    assert "| 2-3 | 16 | 55.0% |" in text
    assert "| 4-4 | 4 | 5.0% |" in text
    # The two instructions with the most samples, in program order, with their reasons.
    assert "| 1 | 30.0% | 4 | `FMUL R2, R2, R3` | long_sb 30 |" in text
    assert "| 3 | 50.0% | 16 | `HMMA R8, R2, R5, R8` | long_sb 40, wait 10 |" in text
    assert "LDG.E" not in text.split("| # |")[1]


def test_every_kernel_of_a_gzipped_page(tmp_path: Path) -> None:
    second = ("kernel_b", [("NOP", 0, 1, 0, 0)])
    out = run(tmp_path, page([KERNEL_A, second]), name="p.csv.gz")
    assert out.returncode == 0, out.stderr
    assert "### kernel_a" in out.stdout and "### kernel_b" in out.stdout
    assert "no samples" in out.stdout


def test_a_launch_listed_twice_in_a_row_is_reported_once(tmp_path: Path) -> None:
    second = ("kernel_b", [("NOP", 1, 1, 1, 0)])
    out = run(tmp_path, page([KERNEL_A, KERNEL_A, second, KERNEL_A]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("### kernel_a") == 2
    assert out.stdout.count("### kernel_b") == 1


def test_a_page_without_kernels_is_an_error(tmp_path: Path) -> None:
    out = run(tmp_path, "==PROF== nothing profiled\n")
    assert out.returncode != 0
    assert "no kernel" in out.stderr
