"""POST /chat (SSE with `event: token` / `event: done`), /tokenize and /detokenize, /health,
/ready and /openapi.json, with httpx."""

from __future__ import annotations

import json

import httpx

from llamaserve_e2e import MODEL_NAME, parse_sse

# Asks for several lines so that some token text holds a newline.
POEM = {"prompt": "Write a poem of four short lines about the sea.", "maxTokens": 24, "temperature": 0}


def read_stream(server, body):
    with httpx.stream("POST", f"{server.url}/chat", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return parse_sse(response.read().decode())


def test_chat_stream_tokens_then_done(server):
    events = read_stream(server, POEM)
    types = [t for t, _ in events]
    assert types[-1] == "done"
    assert set(types[:-1]) == {"token"}, types
    text = "".join(data for t, data in events if t == "token")
    done = json.loads(events[-1][1])
    assert done["finish_reason"] in ("stop", "length")
    assert done["model"] == MODEL_NAME
    usage = done["usage"]
    assert 1 <= usage["completion_tokens"] <= 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    timings = done["timings"]
    assert 0 < timings["ttft_ms"] <= timings["total_ms"]
    assert timings["queue_ms"] >= 0
    # The same request without streaming gives the same text: newlines survived the
    # one-data-line-per-text-line framing.
    whole = httpx.post(f"{server.url}/chat", json={**POEM, "stream": False}, timeout=120).json()
    assert whole["text"] == text
    assert whole["usage"] == usage
    assert "\n" in text, "expected a multi-line answer to exercise multi-line data"


def test_chat_multiline_data_lines_on_the_wire(server):
    with httpx.stream("POST", f"{server.url}/chat", json=POEM, timeout=120) as response:
        raw = response.read().decode()
    # A token holding "\n" is written as two data: lines inside one event.
    blocks = [b for b in raw.split("\n\n") if b.startswith("event: token")]
    assert any(block.count("\ndata: ") >= 2 or block.count("\ndata:") >= 2 for block in blocks), raw[:2000]


def test_chat_bad_requests(server):
    for body, needle in [({}, "'prompt' is required"), ({"prompt": ""}, "must not be empty"),
                         ({"prompt": "x", "maxTokens": "5"}, "'maxTokens'"),
                         ({"prompt": "x", "maxTokens": 0}, "'maxTokens'"),
                         ({"prompt": 7}, "'prompt'")]:
        response = httpx.post(f"{server.url}/chat", json=body, timeout=30)
        assert response.status_code == 400, (body, response.text)
        assert needle in response.json()["error"]["message"]


def test_tokenize_round_trip(client):
    text = "Hello, world! Ünïcödé and emoji 🚀\nnew line"
    tokens = client.post("/tokenize", json={"content": text}).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert client.post("/detokenize", json={"tokens": tokens}).json()["content"] == text
    special = client.post("/tokenize", json={"content": "<|im_start|>user"}).json()["tokens"]
    literal = client.post("/tokenize", json={"content": "<|im_start|>user", "parse_special": False}).json()["tokens"]
    assert len(special) < len(literal)


def test_detokenize_partial_character_is_replaced(client):
    tokens = client.post("/tokenize", json={"content": "🚀"}).json()["tokens"]
    if len(tokens) > 1:
        partial = client.post("/detokenize", json={"tokens": tokens[:1]}).json()["content"]
        assert "\ufffd" in partial


def test_tokenize_errors(client):
    assert client.post("/tokenize", json={"text": "x"}).status_code == 400
    assert client.post("/detokenize", json={"tokens": [10**9]}).status_code == 400
    assert client.post("/detokenize", json={"tokens": ["a"]}).status_code == 400


def test_health_ready_openapi(client):
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/ready").status_code == 200
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]["max_tokens"]["maximum"] == 256
