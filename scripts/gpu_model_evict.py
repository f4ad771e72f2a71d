#!/usr/bin/env python3
"""Two models that do not fit on one GPU together: `serve` holds "a" and "b" (the same 7B
file under two names) with a --gpu-memory-utilization that leaves room for one. A request
for the unloaded one must unload the idle other (least recently used) and then answer, in
turn, several times; device memory (NVML) and the pools' count stay at one model's worth.
Standard library only; writes a markdown table.

  python3 scripts/gpu_model_evict.py BIN MODEL --markdown out.md
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request


def http(url: str, body: dict | None = None, timeout: float = 600) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def metric(url: str, pattern: str) -> float:
    _, text = http(f"{url}/metrics")
    match = re.search(pattern, text, re.M)
    return float(match.group(1)) if match else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("model")
    parser.add_argument("--utilization", default="0.15")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--log", default="gpu_model_evict-server.log")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    log = open(args.log, "wb")
    process = subprocess.Popen(
        [args.binary, "serve", "--model", f"a={args.model},required=true", "--model",
         f"b={args.model},load=on-demand", "--device", "cuda:0", "--ctx-size", "512",
         "--max-running", "32", "--gpu-memory-utilization", args.utilization, "--port", "0"],
        stdout=log, stderr=subprocess.STDOUT)
    rows, ok = [], True
    try:
        url = None
        while url is None:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}")
            match = re.search(r"listening on http://[^:]+:(\d+)", open(args.log).read())
            url = f"http://127.0.0.1:{match.group(1)}" if match else None
            time.sleep(0.2)
        while http(f"{url}/ready", timeout=5)[0] != 200:
            time.sleep(0.5)
        for round_index in range(args.rounds):
            for name in ("b", "a"):
                started = time.monotonic()
                status, text = http(f"{url}/v1/completions",
                                    {"model": name, "prompt": [1000, 1001, 1002], "max_tokens": 8,
                                     "ignore_eos": True, "temperature": 0})
                seconds = time.monotonic() - started
                _, listing = http(f"{url}/v1/models")
                states = {m["id"]: m["state"] for m in json.loads(listing)["data"]}
                memory = metric(url, r'^llamaserve_gpu_memory_used_bytes\{device="0"\} (\S+)$')
                pools = metric(url, r"^llamaserve_gpu_pool_bytes (\S+)$")
                good = (status == 200 and states[name] == "loaded" and
                        list(states.values()).count("loaded") == 1)
                ok &= good
                rows.append(f"| {round_index + 1} | {name} | {status} | {seconds:.2f} | "
                            f"{states['a']} / {states['b']} | {memory / 2**20:.0f} | "
                            f"{pools / 2**20:.1f} | {'ok' if good else 'FAIL ' + text[:200]} |")
                print(rows[-1], file=sys.stderr, flush=True)
    finally:
        process.terminate()
        code = process.wait(timeout=120)
    ok &= code == 0
    table = "\n".join([
        f"Models a and b (the same file) on cuda:0 with --gpu-memory-utilization "
        f"{args.utilization}: room for one. Each request names the unloaded one.", "",
        "| round | request | status | seconds | a / b | device MiB | pools MiB | |",
        "| ---: | --- | ---: | ---: | --- | ---: | ---: | --- |", *rows, "",
        f"Server exit status {code}; {'PASS' if ok else 'FAIL'}."]) + "\n"
    print(table)
    if args.markdown:
        open(args.markdown, "w").write(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
