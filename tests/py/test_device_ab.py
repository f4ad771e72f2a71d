"""scripts/device_ab.sh on the CPU: two builds (the same llamaserve twice) over a synthesized
tiny model in two rotating rounds, and a deadline that stops a round early.

The binary comes from LLAMASERVE_BIN (default build/cpu/src/cli/llamaserve); the tests skip
only when it is not built."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "device_ab.sh"
BIN = Path(os.environ.get("LLAMASERVE_BIN", REPO_ROOT / "build" / "cpu" / "src" / "cli" / "llamaserve"))

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"llamaserve binary not built: {BIN}")


def builds(tmp_path: Path, names: list[str]) -> Path:
    root = tmp_path / "builds"
    for name in names:
        cli = root / name / "src" / "cli"
        cli.mkdir(parents=True)
        (cli / "llamaserve").symlink_to(BIN.resolve())
    return root


def run_ab(tmp_path: Path, names: list[str], **env: str) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    settings = dict(os.environ, OUT=str(out), AB_BUILD_ROOT=str(builds(tmp_path, names)),
                    AB_BUILDS=" ".join(names), AB_MODELS="tiny=tiny:q8_0",
                    AB_MODEL_DIR=str(tmp_path), AB_DEVICE="cpu", **env)
    return subprocess.run(["bash", str(SCRIPT)], env=settings, capture_output=True, text=True,
                          timeout=300)


def test_rounds_rotate_and_every_case_is_recorded(tmp_path: Path) -> None:
    result = run_ab(tmp_path, ["base", "new"],
                    AB_CASES="b1|tiny|--reps 1 -p 4 -n 4 -b 1;b2|tiny|--reps 1 -p 4 -n 4 -b 2",
                    AB_ROUNDS="2")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    runs = [line for line in (out / "summary.txt").read_text().splitlines() if " rc=" in line]
    # Round 1 forward, round 2 backward; each build takes both cases in a row.
    assert [line.split()[:2] for line in runs] == [
        ["base", "b1-1"], ["base", "b2-1"], ["new", "b1-1"], ["new", "b2-1"],
        ["new", "b1-2"], ["new", "b2-2"], ["base", "b1-2"], ["base", "b2-2"]]
    assert all(" rc=0 " in line and "decode b1" in line for line in runs)
    table = (out / "bench-ab.md").read_text().splitlines()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]
    for rnd in ("1", "2"):
        for build in ("base", "new"):
            assert any(r[:3] == [rnd, build, "b2"] and r[3] == "batch 2 x 128+4" and float(r[4]) > 0
                       for r in rows), (rnd, build)
    with tarfile.open(out / "logs.tar.gz") as logs:
        names = logs.getnames()
    assert "logs/new-b2-2.json" in names and "logs/synth-tiny.log" in names
    assert not list(tmp_path.glob("ab-tiny-*.gguf"))  # the model is removed at the end


def test_the_deadline_stops_a_round_and_says_where(tmp_path: Path) -> None:
    result = run_ab(tmp_path, ["base", "new"], AB_CASES="b1|tiny|--reps 1 -p 4 -n 4 -b 1",
                    AB_ROUNDS="3", AB_DEADLINE="20")
    assert result.returncode == 0, result.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "deadline: round 1 stops before base b1" in summary
    assert " rc=" not in summary


def test_a_missing_build_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    settings = dict(os.environ, OUT=str(out), AB_BUILD_ROOT=str(tmp_path), AB_BUILDS="nothing",
                    AB_MODELS="tiny=tiny:q8_0", AB_CASES="b1|tiny|-b 1", AB_DEVICE="cpu")
    result = subprocess.run(["bash", str(SCRIPT)], env=settings, capture_output=True, text=True)
    assert result.returncode != 0
    assert "no " in (out / "summary.txt").read_text()
