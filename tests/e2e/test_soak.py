"""Soak: mixed concurrent traffic with random cancellations for a bounded time (about two
minutes; LLAMASERVE_SOAK_SECONDS to change). Afterwards the server is alive, the engine is
idle with every KV block free, resident memory has not grown, and /metrics accounts for
every request sent. Select it alone with `-m soak`, skip it with `-m "not soak"`."""

from __future__ import annotations

import collections
import os
import random
import threading
import time

import httpx
import pytest

from llamaserve_e2e import wait_for

SOAK_SECONDS = float(os.environ.get("LLAMASERVE_SOAK_SECONDS", "100"))
WORKERS = 7  # more than max-running + max-queue, so that some requests get 429

CHAT = {"messages": [{"role": "user", "content": "Tell me something about rivers."}]}


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = collections.Counter()      # endpoint -> requests sent
        self.statuses = collections.Counter()  # (endpoint, status) seen by the clients
        self.errors = []

    def send(self, endpoint):
        with self.lock:
            self.sent[endpoint] += 1

    def saw(self, endpoint, status):
        with self.lock:
            self.statuses[(endpoint, status)] += 1
        if status == 429:
            time.sleep(0.2)  # a polite client backs off (Retry-After would say 1 s)


def chat_non_stream(client, rng, tally):
    tally.send("/v1/chat/completions")
    r = client.post("/v1/chat/completions", json={**CHAT, "max_tokens": rng.randint(1, 12),
                                                  "temperature": rng.choice([0, 0.8])})
    tally.saw("/v1/chat/completions", r.status_code)
    if r.status_code == 200:
        assert r.json()["usage"]["completion_tokens"] >= 1


def chat_stream(client, rng, tally, cancel_after=None):
    tally.send("/v1/chat/completions")
    body = {**CHAT, "max_tokens": rng.randint(4, 24), "stream": True, "ignore_eos": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200 or cancel_after is None:
            # A stream the client cuts short is counted by the server as 499, not 200.
            tally.saw("/v1/chat/completions", r.status_code)
        if r.status_code != 200:
            r.read()
            return
        lines = r.iter_lines()
        seen = 0
        for line in lines:
            if line.startswith("data: "):
                seen += 1
                if line == "data: [DONE]":
                    return
                if cancel_after is not None and seen >= cancel_after:
                    return  # leaving the with-block closes the connection mid-stream
        raise AssertionError("stream ended without [DONE]")


def completion_maybe_abandoned(client, rng, tally):
    tally.send("/v1/completions")
    # Half of them the client gives up on after a random short wait.
    read_timeout_s = rng.uniform(0.05, 1.0) if rng.random() < 0.5 else 60.0
    try:
        r = client.post("/v1/completions", json={"prompt": "1, 2, 3,", "max_tokens": rng.randint(1, 16),
                                                 "ignore_eos": True},
                        timeout=httpx.Timeout(30, read=read_timeout_s))
        tally.saw("/v1/completions", r.status_code)
    except httpx.ReadTimeout:
        pass  # the client hung up; the server counts it as 499


def simple_chat(client, rng, tally):
    tally.send("/chat")
    with client.stream("POST", "/chat", json={"prompt": "Hello there", "maxTokens": rng.randint(1, 8)}) as r:
        tally.saw("/chat", r.status_code)
        text = r.read().decode()
        if r.status_code == 200:
            assert "event: done" in text or "event: error" in text


def tokenize(client, rng, tally):
    tally.send("/tokenize")
    r = client.post("/tokenize", json={"content": "soak " * rng.randint(1, 50)})
    tally.saw("/tokenize", r.status_code)
    assert r.status_code == 200


def bad_request(client, rng, tally):
    tally.send("/v1/chat/completions")
    r = client.post("/v1/chat/completions", content=b'{"messages": [', headers={"content-type": "application/json"})
    tally.saw("/v1/chat/completions", r.status_code)
    assert r.status_code == 400


def unknown_route(client, rng, tally):
    tally.send("other")
    r = client.get(f"/v1/nothing/{rng.randint(0, 10**6)}")
    tally.saw("other", r.status_code)
    assert r.status_code == 404


ACTIONS = [
    (chat_non_stream, 3),
    (chat_stream, 3),
    (lambda c, r, t: chat_stream(c, r, t, cancel_after=r.randint(1, 4)), 3),
    (completion_maybe_abandoned, 2),
    (simple_chat, 2),
    (tokenize, 1),
    (bad_request, 1),
    (unknown_route, 1),
]


def worker(url, seed, deadline, tally):
    rng = random.Random(seed)
    functions, weights = zip(*ACTIONS)
    with httpx.Client(base_url=url, timeout=60) as client:
        while time.monotonic() < deadline:
            action = rng.choices(functions, weights)[0]
            try:
                action(client, rng, tally)
            except Exception as error:  # noqa: BLE001 - collected and asserted on
                tally.errors.append(repr(error))


def generation_totals(metrics, endpoints):
    return {e: metrics.total("llamaserve_requests_total", endpoint=e) for e in endpoints}


@pytest.mark.soak
def test_soak_mixed_load_with_cancellations(make_server):
    server = make_server("--max-running", "3", "--max-queue", "3", "--queue-timeout-ms", "5000",
                         "--request-timeout-ms", "30000",
                         base=["--threads", "2", "--ctx-size", "512", "--max-tokens-limit", "32"])
    endpoints = ["/v1/chat/completions", "/v1/completions", "/chat", "/tokenize", "other"]
    before = generation_totals(server.metrics(), endpoints)
    tally = Tally()
    start = time.monotonic()
    deadline = start + SOAK_SECONDS
    threads = [threading.Thread(target=worker, args=(server.url, seed, deadline, tally))
               for seed in range(WORKERS)]
    for t in threads:
        t.start()
    # Resident memory once the load has settled (allocator pools, thread stacks, KV pages
    # touched), then again at the end.
    time.sleep(min(20.0, SOAK_SECONDS / 4))
    settled_rss = server.rss_bytes()
    for t in threads:
        t.join(timeout=SOAK_SECONDS + 120)
    assert not any(t.is_alive() for t in threads), "a client is stuck"

    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    idle = wait_for(lambda: (m := server.metrics()).get("llamaserve_running_sequences") == 0
                    and m.get("llamaserve_queue_length") == 0 and m.get("llamaserve_kv_blocks_used") == 0
                    and m.get("llamaserve_http_requests_in_flight") == 0 and m, timeout_s=30)
    assert idle, "engine not idle after the soak"
    assert not tally.errors, tally.errors[:10]

    # Every request is counted exactly once, under its endpoint.
    def accounted():
        after = generation_totals(server.metrics(), endpoints)
        return {e: after[e] - before[e] for e in endpoints}
    assert wait_for(lambda: accounted() == {e: float(tally.sent[e]) for e in endpoints}, timeout_s=10), \
        (accounted(), dict(tally.sent))
    metrics = server.metrics()
    for (endpoint, status), seen in tally.statuses.items():
        assert metrics.get("llamaserve_requests_total", endpoint=endpoint, status=str(status)) >= seen
    statuses = {dict(labels)["status"] for (name, labels), _ in metrics.samples.items()
                if name == "llamaserve_requests_total"}
    assert not {s for s in statuses if s.startswith("5") and s != "503"}, statuses
    assert sum(tally.sent.values()) > 100
    for endpoint in ("/v1/chat/completions", "/v1/completions", "/chat"):
        assert metrics.get("llamaserve_requests_total", endpoint=endpoint, status="200") > 0, endpoint
    assert metrics.get("llamaserve_requests_total", endpoint="/v1/chat/completions", status="499") > 0
    assert metrics.get("llamaserve_kv_blocks_free") > 0

    growth = server.rss_bytes() - settled_rss
    assert growth < 48 * 2**20, f"resident memory grew by {growth / 2**20:.1f} MiB"
