"""`llamaserve loadtest` end to end: a short sweep against the CPU server (report.json fields
and counts, the markdown table, the SVG and PNG picture), a short open-loop step, and servers
that refuse (429), hang or are not there: counted failures, never a crash. The failure cases
run against bench/loadtest/fake_sse_server.py."""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from llamaserve_e2e import BIN, MODEL_NAME, REPO_ROOT

FAKE_SERVER = REPO_ROOT / "bench" / "loadtest" / "fake_sse_server.py"


def loadtest(url: str, out: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), "loadtest", "--url", url, "--out", str(out), "--progress",
                           "none", *args], capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture
def fake_server():
    """Starts fake SSE servers with the given flags; stopped at teardown."""
    started = []

    def start(*args: str) -> str:
        proc = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--port", "0", "--seconds",
                                 "120", *args], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        match = re.search(r"listening on (http://\S+)", proc.stdout.readline())
        assert match, "fake server did not start"
        return match.group(1)

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def check_summary(summary: dict, count: int) -> None:
    assert summary["count"] == count
    assert 0 <= summary["p50"] <= summary["p90"] <= summary["p99"] <= summary["max"]


def test_concurrency_sweep_against_the_server(server, tmp_path):
    run = loadtest(server.url, tmp_path, "-c", "1,4", "--requests", "8", "--output-tokens", "16",
                   "--prompt-tokens", "32", "--warmup-requests", "1")
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["url"] == server.url
    assert report["model"] == MODEL_NAME
    assert report["endpoint"] == "completions"
    assert report["load"] == "concurrency"
    assert report["prompt_format"] == "tokens"
    assert "loadtest" in report["command_line"] and "-c 1,4" in report["command_line"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["date"])
    assert report["warmup"] == {"requests": 1, "failed": 0}
    assert [s["concurrency"] for s in report["steps"]] == [1, 4]
    for step in report["steps"]:
        assert step["requests"] == step["ok"] == 8, step["outcomes"]
        assert step["failed"] == 0 and step["http_429"] == 0
        assert step["outcomes"] == {"ok": 8}
        # ignore_eos and token-id prompts: exact lengths, from the server's usage counts.
        assert step["output_tokens"] == 8 * 16
        assert step["prompt_tokens"] == 8 * 32
        assert step["elapsed_s"] > 0
        assert step["output_tokens_per_s"] == pytest.approx(128 / step["elapsed_s"])
        assert step["requests_per_s"] == pytest.approx(8 / step["elapsed_s"])
        check_summary(step["ttft_ms"], 8)
        check_summary(step["e2e_ms"], 8)
        assert step["e2e_ms"]["p50"] >= step["ttft_ms"]["p50"]
        # One gap per event after the first; an event holding two tokens counts once.
        assert 8 * 10 <= step["itl_ms"]["count"] <= 8 * 15
        check_summary(step["itl_ms"], step["itl_ms"]["count"])
        assert "goodput" not in step

    table = (tmp_path / "report.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| c=")]
    assert [row.split("|")[1].strip() for row in rows] == ["c=1", "c=4"]
    header = next(line for line in table.splitlines() if line.startswith("| load |"))
    assert all(len(row.split("|")) == len(header.split("|")) for row in rows)
    assert "TTFT p99" in header and "ITL p50" in header and "out tok/s" in header

    svg = ET.parse(tmp_path / "report.svg").getroot()
    assert svg.tag.endswith("svg")
    paths = [e for e in svg.iter() if e.tag.endswith("path") or e.tag.endswith("polyline")]
    assert len(paths) > 20  # axes, grid and the plotted series
    texts = " ".join("".join(e.itertext()) for e in svg.iter() if e.tag.endswith("text"))
    assert "time to first token" in texts and "throughput" in texts

    png = (tmp_path / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1500, 480)
    assert 10_000 < len(png) < 2_000_000
    assert "not drawn" not in run.stderr


def test_open_loop_step_with_goodput(server, tmp_path):
    run = loadtest(server.url, tmp_path, "--rate", "4", "--requests", "6", "--output-tokens", "8",
                   "--prompt-tokens", "16:24", "--endpoint", "chat", "--warmup-requests", "0",
                   "--slo-ttft-ms", "60000", "--slo-itl-ms", "60000")
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["load"] == "rate" and report["endpoint"] == "chat"
    assert report["prompt_format"] == "text"
    (step,) = report["steps"]
    assert step["rate_per_s"] == 4
    assert step["ok"] == 6 and step["output_tokens"] == 6 * 8
    assert step["max_send_lag_ms"] >= 0 and step["waited_for_connection"] == 0
    assert step["goodput"]["requests_met"] == 6
    assert step["goodput"]["output_tokens_per_s"] == pytest.approx(step["output_tokens_per_s"])
    assert "| rate=4/s |" in (tmp_path / "report.md").read_text()


def test_refusing_server_counts_429s(fake_server, tmp_path):
    url = fake_server("--status", "429")
    run = loadtest(url, tmp_path, "-c", "2", "--requests", "6", "--warmup-requests", "1")
    assert run.returncode == 3, run.stderr  # reports written, nothing succeeded
    (step,) = json.loads((tmp_path / "report.json").read_text())["steps"]
    assert step["requests"] == 6 and step["failed"] == 6 and step["ok"] == 0
    assert step["http_429"] == 6 and step["outcomes"] == {"http_429": 6}
    assert step["ttft_ms"]["count"] == 0 and step["ttft_ms"]["p50"] is None
    assert "| c=2 | 0 | 6 | 6 |" in (tmp_path / "report.md").read_text()


def test_dead_server_counts_connection_errors(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    run = loadtest(f"http://127.0.0.1:{port}", tmp_path, "-c", "2,3", "--requests", "5",
                   "--gnuplot", "/nonexistent/gnuplot")
    assert run.returncode == 3, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert [s["outcomes"] for s in report["steps"]] == [{"connect_error": 5}] * 2
    # Without gnuplot: the JSON, the table and the script, and a word that it was not drawn.
    assert (tmp_path / "report.md").exists() and (tmp_path / "report.gp").exists()
    assert not (tmp_path / "report.svg").exists()
    assert "picture was not drawn" in run.stderr


def test_slow_server_requests_time_out(fake_server, tmp_path):
    url = fake_server("--first-ms", "5000")
    run = loadtest(url, tmp_path, "-c", "2", "--requests", "2", "--warmup-requests", "0",
                   "--request-timeout-s", "0.5", "--output-tokens", "4")
    assert run.returncode == 3, run.stderr
    (step,) = json.loads((tmp_path / "report.json").read_text())["steps"]
    assert step["outcomes"] == {"timeout": 2}
    assert 0.4 < step["elapsed_s"] < 3  # cut at the timeout, not at the server's 5 s


def test_prompts_file(fake_server, tmp_path):
    url = fake_server("--interval-ms", "1")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello there", "max_tokens": 3}\n'
                       '{"messages": [{"role": "user", "content": "hi"}]}\n')
    run = loadtest(url, tmp_path / "chat", "-c", "2", "--requests", "4", "--prompts",
                   str(prompts), "--endpoint", "chat", "--output-tokens", "5")
    assert run.returncode == 0, run.stderr
    (step,) = json.loads((tmp_path / "chat" / "report.json").read_text())["steps"]
    assert step["ok"] == 4 and step["output_tokens"] == 3 + 5 + 3 + 5

    prompts.write_text('{"prompt": "fine"}\n{"prompt": \n')
    run = loadtest(url, tmp_path / "bad", "-c", "1", "--requests", "1", "--prompts", str(prompts))
    assert run.returncode == 1
    assert f"{prompts}:2: not valid JSON" in run.stderr
