"""Model loading progress of `llamaserve run` and `chat`: a bar when stderr is a terminal, and
plain info log lines (no carriage returns, no escape sequences) when it is a pipe or a file.

The binary comes from LLAMASERVE_BIN (default build/cpu/src/cli/llamaserve); tests skip only
when it (or the model) is missing.
"""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("LLAMASERVE_BIN", REPO_ROOT / "build" / "cpu" / "src" / "cli" / "llamaserve"))
MODEL = REPO_ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = [
    pytest.mark.skipif(not BIN.exists(), reason=f"llamaserve binary not built: {BIN}"),
    pytest.mark.skipif(not MODEL.exists(), reason=f"model missing: {MODEL}"),
]

RUN = ["run", "-m", str(MODEL), "-p", "The capital of France is", "-n", "6", "--temp", "0",
       "--threads", "2"]
LABEL = f"loading {MODEL.name}"


def run_piped(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=300,
                          check=False)


def run_with_terminal_stderr(*args: str) -> tuple[int, str, str]:
    """Runs with stderr on a pseudo-terminal (stdout stays a pipe); returns (code, out, err)."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen([str(BIN), *args], stdout=subprocess.PIPE, stderr=terminal,
                                stdin=subprocess.DEVNULL)
        os.close(terminal)
        terminal = -1
        err = bytearray()
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            err += chunk
        out = proc.stdout.read()
        code = proc.wait(timeout=300)
    finally:
        if terminal >= 0:
            os.close(terminal)
        os.close(controller)
    return code, out.decode(), err.decode(errors="replace")


def test_run_without_terminal_logs_plain_lines():
    result = run_piped(*RUN)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "no text generated"
    assert "\r" not in result.stderr, repr(result.stderr)
    assert "\x1b" not in result.stderr, repr(result.stderr)
    load_lines = [line for line in result.stderr.splitlines() if LABEL in line]
    # A quick load logs one line; a slow one at most three quarter lines more.
    assert 1 <= len(load_lines) <= 4, result.stderr
    assert f"info {LABEL}: done, " in load_lines[-1]
    assert "MiB" in load_lines[-1]


def test_load_line_is_a_log_line_that_log_level_hides():
    result = run_piped("--log-level", "warn", *RUN)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert LABEL not in result.stderr


def test_run_with_terminal_draws_a_bar_and_generates_the_same_text():
    piped = run_piped(*RUN)
    code, out, err = run_with_terminal_stderr(*RUN)
    assert code == 0, err
    assert f"\r{LABEL} [" in err, repr(err)
    assert f"\r{LABEL}: done, " in err, repr(err)
    assert out == piped.stdout  # greedy decoding: progress output changes nothing else


def test_chat_without_terminal_logs_plain_lines():
    result = run_piped("chat", "-m", str(MODEL), "-p", "Hi", "-n", "4", "--temp", "0",
                       "--threads", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "\r" not in result.stderr and "\x1b" not in result.stderr, repr(result.stderr)
    assert f"info {LABEL}: done, " in result.stderr
