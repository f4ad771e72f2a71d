"""The Q8_0 KV cache through the real server: `--kv-cache-type q8_0` (and the per-model key)
loads the model with an 8-bit cache of about half the memory, serves plain and streamed chat
with prefix caching, and a bad value stops the start with a message that names it."""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest

from llamaserve_e2e import BIN, MODEL, parse_sse

CHAT = {"messages": [{"role": "system", "content": "You answer in one short sentence."},
                     {"role": "user", "content": "What does a lighthouse keeper do?"}],
        "max_tokens": 16, "temperature": 0}


def kv_line(log: str) -> tuple[str, float]:
    """The KV cache type and MiB of the executor line the server logs at load."""
    match = re.search(r"KV (\d+) blocks x (\d+) tokens \((\w+), ([\d.]+) MiB\)", log)
    assert match, log
    return match.group(3), float(match.group(4))


def test_q8_0_cache_serves_with_half_the_memory(make_server):
    f16 = make_server()
    q8 = make_server("--kv-cache-type", "q8_0")
    assert kv_line(f16.log())[0] == "F16"
    kind, mib = kv_line(q8.log())
    assert kind == "Q8_0"
    assert mib == pytest.approx(kv_line(f16.log())[1] * 34 / 64, rel=0.01)

    with httpx.Client(base_url=q8.url, timeout=120) as client:
        before = q8.metrics().get("llamaserve_prefix_cache_hit_tokens_total")
        first = client.post("/v1/chat/completions", json=CHAT)
        assert first.status_code == 200, first.text
        text = first.json()["choices"][0]["message"]["content"]
        assert len(text.split()) >= 3
        # The same request again, streamed: the cached prompt blocks give the same answer.
        streamed = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        assert streamed.status_code == 200
        events = [data for _, data in parse_sse(streamed.text) if data != "[DONE]"]
        pieces = [httpx.Response(200, content=e).json()["choices"][0]["delta"].get("content", "")
                  for e in events]
        assert "".join(pieces) == text
        assert q8.metrics().get("llamaserve_prefix_cache_hit_tokens_total") > before


def test_per_model_key_and_bad_values(make_server):
    server = make_server(models=["--model", f"small={MODEL},kv-cache-type=q8_0"])
    assert kv_line(server.log())[0] == "Q8_0"
    for args in (["--kv-cache-type", "q4_0"], ["--model", f"small={MODEL},kv-cache-type=int8"]):
        bad = subprocess.run([str(BIN), "serve", *args, "--port", "0"], capture_output=True,
                             timeout=60, text=True)
        assert bad.returncode != 0
        assert "q4_0" in bad.stderr or "int8" in bad.stderr, bad.stderr
