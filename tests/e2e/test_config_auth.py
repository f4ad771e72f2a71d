"""Options from flags, LLAMASERVE_* variables and the --config file (flag > env > file), API
keys and CORS, on the real binary."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from llamaserve_e2e import MODEL_NAME

BASE = ["--threads", "2", "--ctx-size", "256"]


def max_tokens_limit(server, headers) -> int:
    doc = httpx.get(f"{server.url}/openapi.json", headers=headers, timeout=10).json()
    return doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]["max_tokens"]["maximum"]


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "llamaserve.json"
    path.write_text(json.dumps({"max-tokens-limit": 5, "max-queue": 3, "api-key": ["file-key"],
                                "cors-origin": "https://app.example"}))
    return path


def test_precedence_env_over_file(make_server, config_file):
    server = make_server("--config", str(config_file), base=BASE, wait_ready=False,
                         env={"LLAMASERVE_MAX_TOKENS_LIMIT": "6"})
    auth = {"Authorization": "Bearer file-key"}
    server.wait_ready(headers=auth)
    assert max_tokens_limit(server, auth) == 6  # env beats file
    assert "1 running + 3 queued" not in server.log() and "+ 3 queued" in server.log()  # file beats default
    # The key from the config file works; everything but /health needs it.
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    assert httpx.get(f"{server.url}/ready", timeout=10).status_code == 401
    assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 401
    assert httpx.post(f"{server.url}/v1/chat/completions", timeout=10, json={}).status_code == 401
    assert httpx.get(f"{server.url}/v1/models", headers=auth, timeout=10).status_code == 200
    oai = openai.OpenAI(base_url=f"{server.url}/v1", api_key="file-key", max_retries=0)
    reply = oai.chat.completions.create(model=MODEL_NAME, max_tokens=6,
                                        messages=[{"role": "user", "content": "Hi"}])
    assert reply.usage.completion_tokens >= 1
    with pytest.raises(openai.BadRequestError):  # 7 > the limit of 6
        oai.chat.completions.create(model=MODEL_NAME, max_tokens=7, messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()
    # CORS from the file.
    response = httpx.get(f"{server.url}/health", timeout=10)
    assert response.headers["access-control-allow-origin"] == "https://app.example"
    preflight = httpx.options(f"{server.url}/v1/chat/completions", timeout=10,
                              headers={"Origin": "https://app.example",
                                       "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 204
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()


def test_precedence_flag_over_env_and_key_file(make_server, config_file, tmp_path):
    key_file = tmp_path / "keys.txt"
    key_file.write_text("# one key per line\nkey-a\n\nkey-b\n")
    server = make_server("--config", str(config_file), "--max-tokens-limit", "7", "--api-key-file",
                         str(key_file), base=BASE, wait_ready=False,
                         env={"LLAMASERVE_MAX_TOKENS_LIMIT": "6", "LLAMASERVE_MAX_QUEUE": "2"})
    for key in ("key-a", "key-b", "file-key"):
        server.wait_ready(headers={"Authorization": f"Bearer {key}"})
    assert max_tokens_limit(server, {"Authorization": "Bearer key-b"}) == 7  # flag beats env
    assert "+ 2 queued" in server.log()  # env beats file


def test_no_cors_by_default_and_bad_config_fails_fast(make_server, tmp_path):
    server = make_server(base=BASE)
    response = httpx.get(f"{server.url}/health", timeout=10)
    assert "access-control-allow-origin" not in response.headers
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"max-runing": 3}))
    with pytest.raises(RuntimeError, match="max-runing"):
        make_server("--config", str(bad), base=BASE)
