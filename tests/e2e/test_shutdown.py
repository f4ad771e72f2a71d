"""SIGTERM while streams are in flight: readiness and new requests turn 503, the streams
complete, and the process exits 0. With a short drain budget, streams still running are
ended with an error event instead."""

from __future__ import annotations

import json
import signal
import threading

import httpx

from llamaserve_e2e import json_lines, parse_sse, wait_for

COUNTING = {"prompt": "1, 2, 3, 4, 5,", "temperature": 0, "ignore_eos": True, "stream": True}
# The longest streams the test servers allow (--max-tokens-limit in BASE_ARGS).
LONGEST = 256


def run_stream(url: str, max_tokens: int, first_chunk: threading.Event, results: list, index: int):
    """results[index] = (status, body), or (None, body so far) when the stream was cut."""
    body = b""
    try:
        with httpx.stream("POST", f"{url}/v1/completions",
                          json={**COUNTING, "max_tokens": max_tokens}, timeout=120) as response:
            for chunk in response.iter_raw():
                body += chunk
                first_chunk.set()
            results[index] = (response.status_code, body.decode())
    except httpx.TransportError:
        results[index] = (None, body.decode())


def start_streams(server, n: int, max_tokens: int):
    results = [None] * n
    started = [threading.Event() for _ in range(n)]
    threads = [threading.Thread(target=run_stream, args=(server.url, max_tokens, started[i], results, i))
               for i in range(n)]
    for t in threads:
        t.start()
    for event in started:
        assert event.wait(60), "stream did not start"
    return threads, results


def test_sigterm_lets_streams_finish_and_exits_zero(make_server):
    server = make_server("--max-running", "2", "--drain-timeout-ms", "60000")
    # The longest streams, so that they are still running while the checks below talk to the
    # draining server (once they end, it exits and refuses connections).
    threads, results = start_streams(server, 2, max_tokens=LONGEST)
    server.signal(signal.SIGTERM)
    assert wait_for(lambda: httpx.get(f"{server.url}/ready", timeout=5).status_code == 503, timeout_s=5)
    refused = httpx.post(f"{server.url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "draining"
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
    for t in threads:
        t.join(timeout=120)
    for status, body in results:
        assert status == 200
        events = parse_sse(body)
        assert events[-1][1] == "[DONE]"
        chunks = json_lines(events)
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert sum(1 for c in chunks if c["choices"][0]["text"]) >= 1
    assert server.wait_exit(60) == 0
    log = server.log()
    assert "draining" in log and "shut down" in log


def test_drain_timeout_cancels_what_is_left(make_server):
    server = make_server("--drain-timeout-ms", "300")
    threads, results = start_streams(server, 1, max_tokens=LONGEST)
    server.signal(signal.SIGINT)
    threads[0].join(timeout=60)
    status, body = results[0]
    assert status == 200
    events = parse_sse(body)
    assert events[-1][1] == "[DONE]"
    assert json.loads(events[-2][1])["error"]["code"] == "draining"
    assert server.wait_exit(60) == 0


def test_sigterm_while_idle(make_server):
    server = make_server()
    server.signal(signal.SIGTERM)
    assert server.wait_exit(30) == 0


def test_sigterm_while_loading_exits_at_once(make_server):
    # A long warm-up keeps the server loading for about a second after it listens.
    server = make_server("--warmup-tokens", "64", wait_ready=False)
    server.signal(signal.SIGTERM)
    assert server.wait_exit(5) == 0
    assert "while loading the model; exiting" in server.log()


def test_second_signal_while_draining_exits_at_once(make_server):
    server = make_server("--drain-timeout-ms", "60000")
    threads, results = start_streams(server, 1, max_tokens=LONGEST)
    server.signal(signal.SIGTERM)
    assert wait_for(lambda: "draining" in server.log(), timeout_s=10)
    server.signal(signal.SIGTERM)
    assert server.wait_exit(5) == 1
    threads[0].join(timeout=10)
    assert results[0][0] is None, "the stream should have been cut"
    assert "second SIGTERM while draining" in server.log()
