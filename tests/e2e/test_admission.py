"""Admission control and time limits on dedicated servers: requests past max-running +
max-queue get 429 at once, queue and request timeouts, and the engine is left clean."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from llamaserve_e2e import MODEL_NAME, json_lines, parse_sse, wait_for

# Counting never ends on its own; ignore_eos makes the length exactly max_tokens.
COUNTING = {"prompt": "1, 2, 3, 4, 5,", "temperature": 0, "ignore_eos": True}


def stream_completion(url: str, max_tokens: int, results: list, index: int, barrier=None):
    if barrier is not None:
        barrier.wait()
    started = time.monotonic()
    try:
        with httpx.stream("POST", f"{url}/v1/completions", timeout=120,
                          json={**COUNTING, "max_tokens": max_tokens, "stream": True}) as response:
            first_byte = time.monotonic() - started
            body = response.read().decode()
            results[index] = (response.status_code, dict(response.headers), body, first_byte)
    except Exception as error:  # noqa: BLE001 - reported by the test
        results[index] = ("exception", {}, repr(error), 0)


def engine_idle(server):
    metrics = server.metrics()
    return (metrics.get("llamaserve_running_sequences") == 0 and metrics.get("llamaserve_queue_length") == 0
            and metrics.get("llamaserve_kv_blocks_used") == 0) and metrics


def test_overload_excess_gets_429_at_once(make_server):
    server = make_server("--max-running", "1", "--max-queue", "1")
    n_clients = 6
    results = [None] * n_clients
    barrier = threading.Barrier(n_clients)
    # Long enough that the running request is still running when the last client arrives, also
    # on a loaded machine (otherwise a third request would find the slot free).
    max_tokens = 128
    threads = [threading.Thread(target=stream_completion,
                                args=(server.url, max_tokens, results, i, barrier))
               for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    statuses = [r[0] for r in results]
    assert sorted(statuses, key=str) == [200, 200, 429, 429, 429, 429], statuses
    completed = [r for r in results if r[0] == 200]
    rejected = [r for r in results if r[0] == 429]
    slowest_completion = max(r[3] for r in completed)
    for status, headers, body, first_byte in rejected:
        assert headers["retry-after"] == "1"
        assert json.loads(body)["error"]["code"] == "queue_full"
        assert first_byte < 2.0, "a 429 must not wait for a running request"
    assert slowest_completion > 0
    for status, headers, body, _ in completed:
        events = parse_sse(body)
        assert events[-1][1] == "[DONE]"
        chunks = json_lines(events)
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    metrics = wait_for(lambda: engine_idle(server))
    assert metrics, "engine not idle after the burst"
    assert metrics.get("llamaserve_requests_total", endpoint="/v1/completions", status="429") == 4
    assert metrics.get("llamaserve_requests_total", endpoint="/v1/completions", status="200") == 2
    assert server.metrics().get("llamaserve_generated_tokens_total") >= 2 * max_tokens


def hold_stream(url: str, release: threading.Event):
    """Keeps one long generation running until `release` is set, then hangs up."""
    with httpx.stream("POST", f"{url}/v1/completions", timeout=120,
                      json={**COUNTING, "max_tokens": 256, "stream": True}) as response:
        chunks = response.iter_raw()
        while not release.is_set() and next(chunks, None) is not None:
            pass


def test_queue_timeout_is_429(make_server):
    server = make_server("--max-running", "1", "--max-queue", "4", "--queue-timeout-ms", "150")
    release = threading.Event()
    runner = threading.Thread(target=hold_stream, args=(server.url, release))
    runner.start()
    assert wait_for(lambda: server.metrics().get("llamaserve_running_sequences") == 1)
    started = time.monotonic()
    response = httpx.post(f"{server.url}/v1/completions", json={**COUNTING, "max_tokens": 4}, timeout=60)
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "queue_timeout"
    assert response.headers["retry-after"] == "1"
    assert time.monotonic() - started < 5
    # Streaming requests get the same status: nothing was sent before the outcome was known.
    with httpx.stream("POST", f"{server.url}/v1/completions", timeout=60,
                      json={**COUNTING, "max_tokens": 4, "stream": True}) as streamed:
        assert streamed.status_code == 429
    release.set()
    runner.join(timeout=180)
    assert wait_for(lambda: engine_idle(server))
    assert server.metrics().get("llamaserve_requests_total", endpoint="/v1/completions",
                                status="429") == 2


def test_request_timeout_ends_stream_with_error(make_server):
    server = make_server("--request-timeout-ms", "2000", "--max-running", "2", "--ctx-size", "1100",
                         base=["--threads", "2", "--max-tokens-limit", "1024"])
    oai = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=120)
    received = []
    with pytest.raises(openai.APIError) as error:
        for chunk in oai.completions.create(model=MODEL_NAME, max_tokens=1000, stream=True,
                                            extra_body={"ignore_eos": True},
                                            **{k: v for k, v in COUNTING.items() if k != "ignore_eos"}):
            received.extend(c.text for c in chunk.choices)
    assert "--request-timeout-ms" in str(error.value.message)
    assert received, "the stream should carry tokens before the timeout"
    # Raw SSE: an error event, then [DONE].
    with httpx.stream("POST", f"{server.url}/v1/completions", timeout=60,
                      json={**COUNTING, "max_tokens": 1000, "stream": True}) as response:
        events = parse_sse(response.read().decode())
    assert events[-1][1] == "[DONE]"
    assert json.loads(events[-2][1])["error"]["code"] == "request_timeout"
    # Not streamed: 408.
    response = httpx.post(f"{server.url}/v1/completions", json={**COUNTING, "max_tokens": 1000}, timeout=60)
    assert response.status_code == 408, response.text
    assert response.json()["error"]["code"] == "request_timeout"
    # /chat: event: error.
    with httpx.stream("POST", f"{server.url}/chat", timeout=60,
                      json={"prompt": "Count to a thousand.", "maxTokens": 1000, "ignoreEos": True}) as response:
        events = parse_sse(response.read().decode())
    assert events[-1][0] == "error"
    assert json.loads(events[-1][1])["error"]["code"] == "request_timeout"
    metrics = wait_for(lambda: engine_idle(server))
    assert metrics, "timed-out sequences must be freed"
    assert metrics.get("llamaserve_generations_finished_total", reason="timeout") == 4
