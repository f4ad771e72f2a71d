"""A client that hangs up cancels its generation at the next engine step, streaming or not:
the running count drops and the KV blocks come back, visible in /metrics."""

from __future__ import annotations

import time

import httpx

from llamaserve_e2e import wait_for

LONG = {"prompt": "1, 2, 3, 4, 5,", "temperature": 0, "ignore_eos": True, "max_tokens": 256}


def idle(server):
    metrics = server.metrics()
    return (metrics.get("llamaserve_running_sequences") == 0
            and metrics.get("llamaserve_kv_blocks_used") == 0) and metrics


def test_stream_disconnect_frees_the_sequence(server):
    before = server.metrics()
    with httpx.stream("POST", f"{server.url}/v1/completions", json={**LONG, "stream": True},
                      timeout=60) as response:
        assert response.status_code == 200
        # Keep the iterator alive: dropping an httpx line iterator closes the connection.
        lines = response.iter_lines()
        chunks = 0
        while chunks < 3:
            chunks += next(lines).startswith("data: ")
        during = server.metrics()
        assert during.get("llamaserve_running_sequences") == 1
        assert during.get("llamaserve_kv_blocks_used") > 0
    hung_up = time.monotonic()
    after = wait_for(lambda: idle(server), timeout_s=10)
    assert after, "sequence not freed after the client left"
    assert time.monotonic() - hung_up < 5
    generated = after.get("llamaserve_generated_tokens_total") - before.get("llamaserve_generated_tokens_total")
    assert generated < LONG["max_tokens"], "generation ran to the end despite the disconnect"
    assert wait_for(lambda: server.metrics().get("llamaserve_requests_total", endpoint="/v1/completions",
                                                 status="499")
                    == before.get("llamaserve_requests_total", endpoint="/v1/completions", status="499") + 1)


def test_non_stream_disconnect_frees_the_sequence(server):
    before = server.metrics()
    try:
        httpx.post(f"{server.url}/v1/chat/completions",
                   json={**{k: v for k, v in LONG.items() if k != "prompt"},
                         "messages": [{"role": "user", "content": "Count to one thousand."}]},
                   timeout=httpx.Timeout(60, read=0.3))  # well before 256 tokens
        raise AssertionError("the request should not finish within the read timeout")
    except httpx.ReadTimeout:
        pass
    after = wait_for(lambda: idle(server), timeout_s=10)
    assert after, "sequence not freed after the client left"
    generated = after.get("llamaserve_generated_tokens_total") - before.get("llamaserve_generated_tokens_total")
    assert generated < LONG["max_tokens"]
    assert wait_for(lambda: server.metrics().get("llamaserve_requests_total", endpoint="/v1/chat/completions",
                                                 status="499")
                    == before.get("llamaserve_requests_total", endpoint="/v1/chat/completions", status="499") + 1)


def test_disconnect_while_queued(make_server):
    server = make_server("--max-running", "1", "--max-queue", "2")
    with httpx.stream("POST", f"{server.url}/v1/completions", json={**LONG, "stream": True},
                      timeout=60) as running:
        lines = running.iter_lines()  # kept alive: dropping it would close the connection
        next(lines)
        try:
            httpx.post(f"{server.url}/v1/completions", json=LONG, timeout=httpx.Timeout(30, read=0.5))
        except httpx.ReadTimeout:
            pass
        assert wait_for(lambda: server.metrics().get("llamaserve_queue_length") == 0, timeout_s=5)
        assert server.metrics().get("llamaserve_running_sequences") == 1
    assert wait_for(lambda: idle(server), timeout_s=10)


def test_cancelled_long_prompt_frees_the_engine_within_a_chunk(make_server):
    """A client that leaves while its long prompt is being processed frees the only running
    slot at the next prefill chunk, not after the whole prompt: the request queued behind it
    gets its answer long before the prompt could have finished."""
    server = make_server("--threads", "2", "--ctx-size", "4096", "--max-tokens-limit", "16",
                         "--max-running", "1", "--max-batch-tokens", "256", base=[])
    prompt = "The quick brown fox jumps over the lazy dog. " * 350  # ~3500 tokens
    try:
        httpx.post(f"{server.url}/v1/completions", json={"prompt": prompt, "max_tokens": 1},
                   timeout=httpx.Timeout(60, read=1.0))
        raise AssertionError("a 3500-token prompt should not finish within a second here")
    except httpx.ReadTimeout:
        pass
    left = time.monotonic()
    response = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 1},
                          timeout=60)
    waited = time.monotonic() - left
    assert response.status_code == 200, response.text
    # On 2 cores the whole prompt takes about 25 s; one 256-token chunk well under 2 s.
    assert waited < 5, f"the next request waited {waited:.1f} s"
    assert wait_for(lambda: server.metrics().get("llamaserve_generations_finished_total",
                                                 reason="cancelled") >= 1)
