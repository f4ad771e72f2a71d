"""Prefix caching through the real server: chat requests that share a system prompt (and an
earlier turn) give the same greedy answers with the cache as with --no-prefix-cache, reuse
the cached tokens, and the metrics count queries, hits and evictions; the per-model key and
the flag turn it off."""

from __future__ import annotations

import httpx

SYSTEM = ("You are the assistant of a freight company. Answer in one short sentence. Customers "
          "ask about parcels, invoices, delivery windows and returns; never invent tracking "
          "numbers, and say so when you do not know.")
QUESTIONS = ["Where is my parcel?", "How do I pay an invoice?", "Where is my parcel?",
             "Can I change the delivery window?", "How long do returns take?"]


def answers(url: str) -> list[str]:
    out = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for question in QUESTIONS:
            messages = [{"role": "system", "content": SYSTEM},
                        {"role": "user", "content": question}]
            response = client.post("/v1/chat/completions", json={
                "messages": messages, "max_tokens": 12, "temperature": 0})
            assert response.status_code == 200, response.text
            answer = response.json()["choices"][0]["message"]["content"]
            # The next turn of the same conversation repeats all of this one.
            messages += [{"role": "assistant", "content": answer},
                         {"role": "user", "content": "Thanks. And tomorrow?"}]
            follow_up = client.post("/v1/chat/completions", json={
                "messages": messages, "max_tokens": 8, "temperature": 0})
            assert follow_up.status_code == 200, follow_up.text
            out += [answer, follow_up.json()["choices"][0]["message"]["content"]]
    return out


def test_cached_prefixes_give_the_uncached_answers(make_server):
    cached = make_server()
    uncached = make_server("--no-prefix-cache")
    before = cached.metrics()
    assert answers(cached.url) == answers(uncached.url)

    metrics = cached.metrics()
    queries = (metrics.get("llamaserve_prefix_cache_queries_total")
               - before.get("llamaserve_prefix_cache_queries_total"))
    query_tokens = (metrics.get("llamaserve_prefix_cache_query_tokens_total")
                    - before.get("llamaserve_prefix_cache_query_tokens_total"))
    hits = (metrics.get("llamaserve_prefix_cache_hit_tokens_total")
            - before.get("llamaserve_prefix_cache_hit_tokens_total"))
    assert queries == 2 * len(QUESTIONS)
    # Every request after the first shares at least the system prompt's leading blocks;
    # follow-ups share their whole first turn.
    assert hits >= 0.5 * query_tokens, (hits, query_tokens)
    assert metrics.get("llamaserve_kv_blocks_cached") > 0
    assert metrics.get("llamaserve_prefix_cache_evictions_total") == 0

    off = uncached.metrics()
    assert off.get("llamaserve_prefix_cache_queries_total") == 0
    assert off.get("llamaserve_prefix_cache_hit_tokens_total") == 0
    assert off.get("llamaserve_kv_blocks_cached") == 0


def test_a_small_cache_evicts_and_still_answers_alike(make_server):
    # 1024 tokens of KV (64 blocks) against four system prompts of ~350 tokens each, asked in
    # turn twice: the conversations evict one another's blocks.
    small = make_server("--kv-cache-tokens", "1024", "--max-running", "2")
    uncached = make_server("--kv-cache-tokens", "1024", "--max-running", "2",
                           "--no-prefix-cache")
    with httpx.Client(base_url=small.url, timeout=120) as a, \
            httpx.Client(base_url=uncached.url, timeout=120) as b:
        for i in range(8):
            system = SYSTEM + " " + " ".join(f"Rule {i % 4}.{k}: be precise." for k in range(30))
            body = {"messages": [{"role": "system", "content": system},
                                 {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                    "max_tokens": 6, "temperature": 0}
            first = a.post("/v1/chat/completions", json=body)
            second = b.post("/v1/chat/completions", json=body)
            assert first.status_code == second.status_code == 200, (first.text, second.text)
            assert (first.json()["choices"][0]["message"]["content"]
                    == second.json()["choices"][0]["message"]["content"])
    assert small.metrics().get("llamaserve_prefix_cache_evictions_total") > 0


def test_the_model_key_turns_it_off(make_server):
    from llamaserve_e2e import MODEL

    server = make_server(base=["--threads", "2", "--ctx-size", "512"],
                         models=["-m", f"m={MODEL},no-prefix-cache=true"])
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for _ in range(2):
            response = client.post("/v1/completions", json={
                "model": "m", "prompt": SYSTEM, "max_tokens": 2, "temperature": 0})
            assert response.status_code == 200, response.text
    metrics = server.metrics()
    assert metrics.get("llamaserve_prefix_cache_queries_total") == 0
