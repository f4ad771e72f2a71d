"""`llamaserve run` and `llamaserve chat` with the real SmolLM2 model.

The binary comes from LLAMASERVE_BIN (default build/cpu/src/cli/llamaserve); tests skip
only when it (or the model) is missing. Greedy decoding (--temp 0) makes outputs
deterministic, so they can be compared between runs.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("LLAMASERVE_BIN", REPO_ROOT / "build" / "cpu" / "src" / "cli" / "llamaserve"))
MODEL = REPO_ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"llamaserve binary not built: {BIN}")
needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"model missing: {MODEL}")

# A question whose greedy answer is well determined (top-2 margin of the first token 1.47 in
# exact arithmetic), so that the 8-bit activations of the optimized CPU kernels cannot tip it.
# The bare "What is the capital of France?" is a near tie (margin 0.08): see docs/cpu.md.
WELL_DETERMINED_QUESTION = "What is the capital of France? Answer in one word."


def llamaserve(*args: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, check=False)


@needs_model
def test_run_greedy_is_deterministic_and_non_empty():
    args = ["run", "-m", str(MODEL), "-p", "The three primary colors are", "-n", "12", "--temp", "0",
            "--threads", "2"]
    first = llamaserve(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip(), "no text generated"
    second = llamaserve(*args)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    # Raw completion: the prompt itself is not echoed.
    assert not first.stdout.startswith("The three primary colors are")


@needs_model
def test_run_same_seed_same_sample():
    args = ["run", "-m", str(MODEL), "-p", "Once upon a time", "-n", "12", "--temp", "0.9", "--seed", "1234",
            "--threads", "2"]
    first = llamaserve(*args)
    second = llamaserve(*args)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout and first.stdout == second.stdout


@needs_model
def test_run_verbose_reports_speed_on_stderr_only():
    result = llamaserve("run", "-m", str(MODEL), "-p", "Hello", "-n", "4", "--temp", "0", "--verbose",
                        "--threads", "2")
    assert result.returncode == 0, result.stderr
    assert "tok/s" in result.stderr
    assert "prompt:" in result.stderr and "generation:" in result.stderr
    assert "tok/s" not in result.stdout


@needs_model
def test_chat_answers_the_capital_of_france():
    result = llamaserve("chat", "-m", str(MODEL), "-p", WELL_DETERMINED_QUESTION, "--temp", "0",
                        "-n", "48", "--threads", "2")
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout, result.stdout
    # The template's markup never leaks into the answer.
    assert "<|im_end|>" not in result.stdout and "<|im_start|>" not in result.stdout


@needs_model
def test_chat_interactive_keeps_going_until_exit():
    stdin = WELL_DETERMINED_QUESTION + "\n\n/exit\nThis line must not be answered.\n"
    result = llamaserve("chat", "-m", str(MODEL), "--temp", "0", "-n", "24", "--threads", "2", stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout, result.stdout

    # The same question one-shot gives the same greedy answer as the first interactive turn.
    one_shot = llamaserve("chat", "-m", str(MODEL), "-p", WELL_DETERMINED_QUESTION, "--temp", "0",
                          "-n", "24", "--threads", "2")
    assert one_shot.returncode == 0, one_shot.stderr
    assert result.stdout == one_shot.stdout


def test_bad_model_path_fails_with_a_clear_message(tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    for command in (["run", "-p", "hi"], ["chat", "-p", "hi"]):
        result = llamaserve(command[0], "-m", str(missing), *command[1:])
        assert result.returncode == 1
        assert str(missing) in result.stderr
        assert result.stdout == ""

    not_gguf = tmp_path / "not-a-model.gguf"
    not_gguf.write_bytes(b"this is not a gguf file at all" * 10)
    result = llamaserve("run", "-m", str(not_gguf), "-p", "hi")
    assert result.returncode == 1
    assert "llamaserve run:" in result.stderr


@needs_model
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs and sched_setaffinity")
def test_default_threads_follow_the_cpu_affinity():
    """`--threads 0` (the default) counts the CPUs the process may use, not the machine's:
    started on one CPU, the executor runs one thread."""
    one_cpu = min(os.sched_getaffinity(0))
    result = subprocess.run([str(BIN), "run", "-m", str(MODEL), "-p", "Hello", "-n", "2", "--temp", "0"],
                            capture_output=True, text=True, timeout=300, check=False,
                            preexec_fn=lambda: os.sched_setaffinity(0, {one_cpu}))
    assert result.returncode == 0, result.stderr
    assert "cpu, 1 threads," in result.stderr, result.stderr
    # Unrestricted: every CPU of the affinity mask, fewer only under a cgroup CPU quota.
    everywhere = llamaserve("run", "-m", str(MODEL), "-p", "Hello", "-n", "2", "--temp", "0")
    threads = re.search(r"cpu, (\d+) threads,", everywhere.stderr)
    assert threads, everywhere.stderr
    assert 1 <= int(threads.group(1)) <= len(os.sched_getaffinity(0))
