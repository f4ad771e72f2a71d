"""`llamaserve bench` on the CPU with the real SmolLM2 model: a smoke test of the command's
JSON output (the GPU runs it on the 7B shape, see scripts/device_run.sh), and of the errors for
devices this build or this machine cannot use.

The binary comes from LLAMASERVE_BIN (default build/cpu/src/cli/llamaserve); tests skip only
when it (or the model) is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("LLAMASERVE_BIN", REPO_ROOT / "build" / "cpu" / "src" / "cli" / "llamaserve"))
MODEL = REPO_ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = pytest.mark.skipif(not BIN.exists(), reason=f"llamaserve binary not built: {BIN}")
needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"model missing: {MODEL}")


def llamaserve(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


@needs_model
def test_bench_json_on_cpu():
    result = llamaserve("bench", "-m", str(MODEL), "-p", "16", "-n", "4", "-b", "1,2", "--reps", "1",
                        "--batch-prompt", "8", "--threads", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # stdout is the JSON alone; logs go to stderr
    assert report["device"] == "cpu"
    assert report["model"] == str(MODEL)
    assert report["reps"] == 1
    assert report["copy_bandwidth_gbps"] > 0
    assert report["weight_bytes_per_token"] > 50e6  # SmolLM2-135M in Q4_1/Q8_0: ~90 MB
    assert report["kv_bytes_per_token"] > 0
    assert "cpu" in report["executor"] and "Executor" in report["method"]

    cases = {case["name"]: case for case in report["cases"]}
    assert list(cases) == ["prompt 16", "decode b1", "batch 1 x 8+4", "batch 2 x 8+4"]
    for case in cases.values():
        assert case["seconds"] > 0 and case["tokens_per_s"] > 0 and case["ms_per_token"] > 0
        assert case["tflops"] > 0
        assert abs(case["tokens_per_s"] - case["tokens"] / case["seconds"]) <= 1e-6 * case["tokens_per_s"]
    assert cases["prompt 16"]["tokens"] == 16 and "gbps" not in cases["prompt 16"]
    assert cases["decode b1"]["tokens"] == 4 and cases["decode b1"]["sequences"] == 1
    assert cases["batch 2 x 8+4"]["tokens"] == 8 and cases["batch 2 x 8+4"]["sequences"] == 2
    for name in ("decode b1", "batch 1 x 8+4", "batch 2 x 8+4"):
        assert cases[name]["gbps"] > 0
        assert 0 < cases[name]["pct_of_copy"] < 1000
        # ms per step = 1000 / (steps per second)
        steps_per_s = cases[name]["tokens_per_s"] / cases[name]["sequences"]
        assert abs(cases[name]["ms_per_token"] - 1e3 / steps_per_s) <= 1e-6 * cases[name]["ms_per_token"]


@needs_model
def test_bench_with_a_q8_0_kv_cache():
    reports = {}
    for kv_type in ("f16", "q8_0"):
        result = llamaserve("bench", "-m", str(MODEL), "-p", "8", "-n", "2", "-b", "1", "--reps", "1",
                            "--batch-prompt", "4", "--threads", "2", "--kv-cache-type", kv_type,
                            "--json")
        assert result.returncode == 0, result.stderr
        reports[kv_type] = json.loads(result.stdout)
    assert "Q8_0" in reports["q8_0"]["executor"] and "F16" in reports["f16"]["executor"]
    # 34 bytes for every 32 values against 64.
    assert reports["q8_0"]["kv_bytes_per_token"] * 64 == reports["f16"]["kv_bytes_per_token"] * 34
    bad = llamaserve("bench", "-m", str(MODEL), "--kv-cache-type", "q4_0")
    assert bad.returncode != 0 and "q4_0" in bad.stderr


@needs_model
def test_bench_table_on_cpu():
    result = llamaserve("bench", "-m", str(MODEL), "-p", "8", "-n", "2", "-b", "2", "--reps", "1",
                        "--batch-prompt", "4", "--threads", "2")
    assert result.returncode == 0, result.stderr
    assert "copy bandwidth" in result.stdout and "%copy" in result.stdout
    for name in ("prompt 8", "decode b1", "batch 2 x 4+2"):
        assert name in result.stdout


@needs_model
def test_bench_refuses_bad_devices_and_sizes():
    bad = llamaserve("bench", "-m", str(MODEL), "--device", "cuda:x", "--reps", "1")
    assert bad.returncode != 0 and "expected cpu, cuda, cuda:N" in bad.stderr
    several = llamaserve("bench", "-m", str(MODEL), "--devices", "0,1", "--reps", "1")
    assert several.returncode != 0 and "need 1 devices; --devices '0,1' lists 2" in several.stderr
    tp_on_cpu = llamaserve("bench", "-m", str(MODEL), "--tp", "2", "--reps", "1", "-p", "4", "-n", "1",
                           "-b", "1")
    assert tp_on_cpu.returncode != 0 and "need CUDA devices" in tp_on_cpu.stderr
    zero = llamaserve("bench", "-m", str(MODEL), "-n", "0")
    assert zero.returncode != 0 and ">= 1" in zero.stderr
    for profile in (["--profile-prompt"], ["--profile-steps", "2"]):
        on_cpu = llamaserve("bench", "-m", str(MODEL), "--reps", "1", *profile)
        assert on_cpu.returncode != 0 and "need a CUDA device" in on_cpu.stderr, profile


def test_run_on_cuda_device_without_support_or_device_fails_cleanly():
    # A CPU-only build names the missing CUDA support; a CUDA build on a machine without a GPU
    # fails in device setup. Either way: a one-line error, no crash.
    result = llamaserve("run", "-m", str(MODEL), "-p", "hi", "-n", "1", "--device", "cuda:0")
    if result.returncode == 0:
        pytest.skip("this machine has a usable CUDA device")
    assert result.returncode == 1
    assert "llamaserve run:" in result.stderr
    assert "Segmentation" not in result.stderr
