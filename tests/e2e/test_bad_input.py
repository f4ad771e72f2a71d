"""Malformed and hostile requests get the right 4xx with an OpenAI-style error body, and the
server keeps serving afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import httpx
import pytest

from llamaserve_e2e import BIN, MODEL

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def assert_error(response: httpx.Response, status: int, needle: str = "", code: str = ""):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    assert error["message"]
    if needle:
        assert needle in error["message"], error
    if code:
        assert error["code"] == code, error


@pytest.fixture(autouse=True)
def still_serving(client):
    yield
    assert client.get("/health").status_code == 200
    assert client.get("/ready").status_code == 200


@pytest.mark.parametrize("body, needle", [
    (b"{not json", "invalid JSON"),
    (b"", "empty"),
    (b"[1, 2, 3]", "JSON object"),
    (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "invalid JSON"),
    (b"{" * 200 + b"}" * 200, "nesting"),
])
def test_malformed_json(client, body, needle):
    assert_error(client.post(CHAT, content=body, headers={"content-type": "application/json"}), 400, needle)


def test_invalid_utf8(client):
    body = b'{"messages": [{"role": "user", "content": "caf\xe9"}]}'
    assert_error(client.post(CHAT, content=body), 400, "UTF-8")
    assert_error(client.post("/v1/completions", content=b'{"prompt": "\xff\xfe"}'), 400, "UTF-8")
    assert_error(client.post("/tokenize", content=b'{"content": "\xc3"}'), 400, "UTF-8")


@pytest.mark.parametrize("extra, needle", [
    ({"max_tokens": "8"}, "'max_tokens' must be an integer"),
    ({"max_tokens": 2.5}, "'max_tokens' must be an integer"),
    ({"temperature": "hot"}, "'temperature' must be a number"),
    ({"stream": "yes"}, "'stream' must be a boolean"),
    ({"stop": 5}, "'stop'"),
    ({"messages": "hi"}, "'messages' must be an array"),
    ({"messages": [{"role": "user", "content": 5}]}, "'messages[0].content'"),
    ({"messages": [{"role": 1, "content": "x"}]}, "'messages[0].role'"),
    ({"seed": "x"}, "'seed'"),
    ({"stream_options": []}, "'stream_options'"),
])
def test_wrong_types(client, extra, needle):
    assert_error(client.post(CHAT, json={"messages": MESSAGES, **extra}), 400, needle)


def test_unknown_fields_are_ignored(client):
    response = client.post(CHAT, json={"messages": MESSAGES, "max_tokens": 2, "future_option": {"a": 1},
                                       "response_format": {"type": "text"}})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("body, needle", [
    ({"messages": []}, "at least one message"),
    ({}, "'messages' is required"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "wizard"),
    ({"messages": [{"role": "user"}]}, "is required"),
])
def test_empty_or_bad_messages(client, body, needle):
    assert_error(client.post(CHAT, json=body), 400, needle)


@pytest.mark.parametrize("value", [-1, 0, 257, 10**6, 2**63, 10**30])
def test_bad_max_tokens(client, value):
    response = client.post(CHAT, json={"messages": MESSAGES, "max_tokens": value})
    assert_error(response, 400, "max_tokens")


def test_max_completion_tokens_limit(client):
    assert_error(client.post(CHAT, json={"messages": MESSAGES, "max_completion_tokens": 1000}), 400,
                 "--max-tokens-limit")


def test_out_of_range_sampling(client):
    for extra in ({"temperature": 3}, {"top_p": -0.5}, {"top_k": -2}, {"n": 2}, {"n": 0},
                  {"presence_penalty": 9}, {"repetition_penalty": 0}, {"min_p": 2},
                  {"logprobs": False, "top_logprobs": 2}, {"logit_bias": {"1": 5}}):
        assert_error(client.post(CHAT, json={"messages": MESSAGES, **extra}), 400)


def test_unknown_model(client):
    assert_error(client.post(CHAT, json={"model": "gpt-4o", "messages": MESSAGES}), 404, "gpt-4o",
                 "model_not_found")
    assert_error(client.post("/v1/completions", json={"model": "x", "prompt": "y"}), 404,
                 code="model_not_found")
    assert_error(client.get("/v1/models/nope"), 404, code="model_not_found")


def test_prompt_outside_vocabulary_and_too_long(client):
    assert_error(client.post("/v1/completions", json={"prompt": [1, 2, 10**8], "max_tokens": 2}), 400,
                 "vocabulary")
    long_prompt = "word " * 2000  # far beyond the 512-token context
    assert_error(client.post("/v1/completions", json={"prompt": long_prompt, "max_tokens": 2}), 400,
                 code="context_length_exceeded")
    ids = client.post("/tokenize", json={"content": "hello " * 600}).json()["tokens"]
    assert len(ids) >= 480
    assert_error(client.post("/v1/completions", json={"prompt": ids[:480], "max_tokens": 60}), 400,
                 code="context_length_exceeded")


def test_unsupported_options(client):
    assert_error(client.post("/v1/completions", json={"prompt": "x", "echo": True}), 400, "echo")
    assert_error(client.post("/v1/completions", json={"prompt": ["a", "b"]}), 400, "one prompt")
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]
    assert_error(client.post(CHAT, json={"messages": image}), 400, "image_url")


def test_huge_body_is_413(client):
    body = b'{"prompt": "' + b"a" * (5 << 20) + b'"}'
    assert_error(client.post("/v1/completions", content=body), 413, code="request_too_large")


def test_routes_and_methods(client):
    assert_error(client.get("/v1/nothing"), 404, code="route_not_found")
    response = client.get(CHAT)
    assert_error(response, 405, code="method_not_allowed")
    assert response.headers["allow"] == "POST"
    assert_error(client.put("/tokenize", json={}), 405)


def test_garbage_http_does_not_hurt(server, client):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00garbage that is not HTTP\r\n\r\n")
        sock.recv(4096)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
        # The client vanishes mid-body.
    # Still serving: health, and a generation.
    assert client.get("/health").status_code == 200
    response = client.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["finish_reason"] in ("length", "stop")
    assert isinstance(body["choices"][0]["text"], str)
    assert body["usage"]["completion_tokens"] <= 2


def test_serve_exits_at_once_when_the_model_cannot_load(tmp_path):
    """A model file that fails fast (missing, empty, random bytes, truncated) ends `serve` with a
    non-zero status within seconds, every time: a liveness probe then restarts it."""
    real = MODEL.read_bytes()[:4096]
    broken = {
        "missing": tmp_path / "missing.gguf",
        "empty": tmp_path / "empty.gguf",
        "random": tmp_path / "random.gguf",
        "truncated": tmp_path / "truncated.gguf",
    }
    broken["empty"].write_bytes(b"")
    broken["random"].write_bytes(os.urandom(4096))
    broken["truncated"].write_bytes(real)
    for kind, path in broken.items():
        for attempt in range(5):
            start = time.monotonic()
            proc = subprocess.run([str(BIN), "serve", "-m", str(path), "--port", "0"],
                                  capture_output=True, text=True, timeout=30)
            elapsed = time.monotonic() - start
            assert proc.returncode == 1, (kind, attempt, proc.returncode, proc.stderr[-500:])
            assert elapsed < 5, (kind, attempt, elapsed)
