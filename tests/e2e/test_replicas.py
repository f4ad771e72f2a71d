"""--replicas on the CPU: two whole-model engines behind the least-loaded router. Concurrent
streams all succeed with the text one replica gives, /metrics has per-replica series, and
impossible device combinations stop the server at start with a message."""

from __future__ import annotations

import subprocess
import threading

import httpx
import pytest

from llamaserve_e2e import BASE_ARGS, BIN, MODEL, json_lines, parse_sse

PROMPTS = [
    "The capital of France is",
    "1, 2, 3, 4, 5,",
    "Write a haiku about the sea:",
    "def fibonacci(n):",
    "The three primary colors are",
    "Once upon a time, in a small village,",
]
MAX_TOKENS = 12


def greedy(prompt: str, stream: bool) -> dict:
    return {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
            "stream": stream}


def stream_text(url: str, prompt: str) -> tuple[int, str]:
    with httpx.stream("POST", f"{url}/v1/completions", json=greedy(prompt, True), timeout=120) as response:
        body = response.read().decode()
        if response.status_code != 200:
            return response.status_code, body
    chunks = json_lines(parse_sse(body))
    assert parse_sse(body)[-1][1] == "[DONE]"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    return 200, "".join(chunk["choices"][0]["text"] for chunk in chunks)


def test_concurrent_streams_match_one_replica(make_server):
    # One CPU thread, as each of the two replicas below has (BASE_ARGS' 2 threads split in 2).
    one_thread = [arg if previous != "--threads" else "1"
                  for previous, arg in zip([None, *BASE_ARGS], BASE_ARGS)]
    single = make_server("--max-running", "4", base=one_thread)
    expected = []
    for prompt in PROMPTS:
        response = httpx.post(f"{single.url}/v1/completions", json=greedy(prompt, False), timeout=120)
        assert response.status_code == 200, response.text
        expected.append(response.json()["choices"][0]["text"])
    assert single.stop() == 0, single.log()

    server = make_server("--replicas", "2", "--max-running", "4")
    assert "2 replicas: [0] cpu, 1 threads" in server.log()
    before = server.metrics()
    results = [None] * len(PROMPTS)
    barrier = threading.Barrier(len(PROMPTS))

    def run(index: int) -> None:
        barrier.wait()
        results[index] = stream_text(server.url, PROMPTS[index])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [status for status, _ in results] == [200] * len(PROMPTS), results
    assert [text for _, text in results] == expected

    after = server.metrics()
    generated = {r: after.get("llamaserve_replica_generated_tokens_total", replica=r)
                 - before.get("llamaserve_replica_generated_tokens_total", replica=r) for r in ("0", "1")}
    assert generated["0"] > 0 and generated["1"] > 0, generated  # both replicas took requests
    assert generated["0"] + generated["1"] == len(PROMPTS) * MAX_TOKENS
    total = (after.get("llamaserve_generated_tokens_total")
             - before.get("llamaserve_generated_tokens_total"))
    assert total == len(PROMPTS) * MAX_TOKENS
    for name in ("llamaserve_replica_running_sequences", "llamaserve_replica_queue_length",
                 "llamaserve_replica_kv_blocks_used", "llamaserve_replica_kv_blocks_total"):
        for replica in ("0", "1"):
            assert (name, frozenset({("replica", replica)})) in after.samples, (name, replica)
    blocks = after.get("llamaserve_replica_kv_blocks_total", replica="0")
    assert blocks > 0 and blocks == after.get("llamaserve_replica_kv_blocks_total", replica="1")
    assert after.total("llamaserve_replica_kv_blocks_total") == (
        after.get("llamaserve_kv_blocks_used") + after.get("llamaserve_kv_blocks_free"))
    assert not any(name.startswith("llamaserve_gpu_") for name, _ in after.samples)


@pytest.mark.parametrize("args, message", [
    (["--replicas", "0"], "--replicas"),
    (["--tp", "2"], "tensor and pipeline parallelism need CUDA devices"),
    (["--replicas", "3", "--devices", "0,1"], "3 replicas x tensor parallel 1 x pipeline parallel 1 need 3 devices"),
    (["--pp", "2", "--devices", "0,1", "--layer-split", "10,10,10"], "--layer-split lists 3 stages"),
])
def test_bad_combinations_fail_at_start(args, message):
    result = subprocess.run([str(BIN), "serve", "-m", str(MODEL), "--port", "0", *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0, result.stderr
    assert message in result.stdout + result.stderr, result.stdout + result.stderr
    assert "listening on" not in result.stderr  # refused before binding
