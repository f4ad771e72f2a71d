#!/usr/bin/env python3
"""Model lifecycle on a GPU under load: a `llamaserve serve` holding one model on cuda:0 is
unloaded, loaded, and reloaded --cycles times while streaming clients keep requesting it;
device memory (NVML, llamaserve_gpu_memory_used_bytes of /metrics) is read after each step.

Passes when every stream ends with [DONE] and its full length, memory after the unload returns
to the level before the first load (within --tolerance-mib), memory after the last reload is
within the tolerance of memory after the first load (no growth over the cycles), and, on a GPU,
the device pools' own count (llamaserve_gpu_pool_bytes) is 0 after each unload and the same
after every reload.
Standard library only; writes a JSON report and a markdown table.

  python3 scripts/gpu_model_reload.py BIN MODEL --json out.json --markdown out.md
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ADMIN_KEY = "reload-test-key"


def http(url: str, method: str = "GET", body: dict | None = None, admin: bool = False,
         timeout: float = 600) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if admin:
        request.add_header("Authorization", f"Bearer {ADMIN_KEY}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


MEMORY_SOURCE: dict = {}


def gpu_memory_mib(url: str) -> float:
    """Device memory in use (NVML); on the CPU, the server's resident memory."""
    if MEMORY_SOURCE.get("pid"):
        for line in open(f"/proc/{MEMORY_SOURCE['pid']}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    _, text = http(f"{url}/metrics")
    match = re.search(r'^llamaserve_gpu_memory_used_bytes\{device="0"\} (\S+)$', text, re.M)
    if not match:
        raise RuntimeError("no llamaserve_gpu_memory_used_bytes in /metrics (NVML?)")
    return float(match.group(1)) / (1 << 20)


def pool_mib(url: str) -> float | None:
    """llamaserve_gpu_pool_bytes: what the executors' device pools hold (None on the CPU)."""
    _, text = http(f"{url}/metrics")
    match = re.search(r'^llamaserve_gpu_pool_bytes (\S+)$', text, re.M)
    return float(match.group(1)) / (1 << 20) if match else None


def state(url: str) -> str:
    _, text = http(f"{url}/v1/models")
    return json.loads(text)["data"][0]["state"]


def settle(url: str, target: float | None, tolerance: float, timeout_s: float = 60) -> float:
    """Memory once it stops moving (or reaches `target` within the tolerance)."""
    deadline = time.monotonic() + timeout_s
    last = gpu_memory_mib(url)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = gpu_memory_mib(url)
        if target is not None and abs(now - target) <= tolerance:
            return now
        if target is None and abs(now - last) < 1:
            return now
        last = now
    return last


class Load:
    """Streaming clients that keep requesting until stopped; counts bad streams."""

    def __init__(self, url: str, streams: int, max_tokens: int):
        self.url, self.max_tokens = url, max_tokens
        self.stop = threading.Event()
        self.done = 0
        self.bad: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run) for _ in range(streams)]

    def run(self) -> None:
        body = {"model": "a", "prompt": [1000 + i for i in range(64)], "max_tokens": self.max_tokens,
                "ignore_eos": True, "stream": True, "temperature": 0}
        while not self.stop.is_set():
            status, text = http(f"{self.url}/v1/completions", "POST", body)
            events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
            ok = (status == 200 and events and events[-1] == "[DONE]" and
                  json.loads(events[-2])["choices"][0]["finish_reason"] == "length" and
                  len(events) - 2 == self.max_tokens)
            with self.lock:
                if ok:
                    self.done += 1
                else:
                    self.bad.append(f"{status}: {text[-300:]}")

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=300)


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("model")
    parser.add_argument("--device", default="cuda:0",
                        help="cuda:N, or cpu (memory is then the server's RSS)")
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--tolerance-mib", type=float, default=256)
    parser.add_argument("--serve-args", default="",
                        help="more flags for serve, e.g. a memory cap that leaves no room for "
                        "two versions (the reload then drains the old one first)")
    parser.add_argument("--log", default="gpu_model_reload-server.log")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args()

    log = open(args.log, "wb")
    process = subprocess.Popen([args.binary, "serve", "--model", f"a={args.model},required=true",
                                "--device", args.device, "--ctx-size", "512", "--max-running", "32",
                                "--admin-api-key", ADMIN_KEY, "--port", "0",
                                *args.serve_args.split()],
                               stdout=log, stderr=subprocess.STDOUT)
    if args.device == "cpu":
        MEMORY_SOURCE["pid"] = process.pid
    report: dict = {"cycles": [], "device": args.device}
    try:
        url = None
        deadline = time.monotonic() + 600
        while url is None and time.monotonic() < deadline:
            match = re.search(r"listening on http://[^:]+:(\d+)", open(args.log).read())
            url = f"http://127.0.0.1:{match.group(1)}" if match else None
            time.sleep(0.2)
        while http(f"{url}/ready", timeout=5)[0] != 200:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}")
            time.sleep(0.5)
        report["loaded_mib"] = settle(url, None, args.tolerance_mib)
        report["loaded_pool_mib"] = pool_mib(url)
        status, text = http(f"{url}/admin/models/a/unload", "POST", admin=True)
        assert status == 200, text
        report["unloaded_mib"] = settle(url, None, args.tolerance_mib)
        report["unloaded_pool_mib"] = pool_mib(url)
        started = time.monotonic()
        status, text = http(f"{url}/admin/models/a/load", "POST", admin=True)
        assert status == 200, text
        report["load_s"] = round(time.monotonic() - started, 2)
        report["reloaded_first_mib"] = settle(url, report["loaded_mib"], args.tolerance_mib)
        with Load(url, args.streams, args.max_tokens) as load:
            for cycle in range(args.cycles):
                time.sleep(1.0)
                started = time.monotonic()
                status, text = http(f"{url}/admin/models/a/reload", "POST", admin=True)
                assert status == 200, text
                seconds = time.monotonic() - started
                # The old version is freed once its streams end (a few seconds at most).
                memory = settle(url, report["loaded_mib"], args.tolerance_mib)
                report["cycles"].append({"cycle": cycle + 1, "reload_s": round(seconds, 2),
                                         "memory_mib": memory, "pool_mib": pool_mib(url),
                                         "streams_done": load.done})
                print(json.dumps(report["cycles"][-1]), file=sys.stderr, flush=True)
        report["streams_ok"] = load.done
        report["streams_bad"] = load.bad[:5]
        report["streams_bad_count"] = len(load.bad)
        status, text = http(f"{url}/admin/models/a/unload", "POST", admin=True)
        assert status == 200, text
        report["final_unloaded_mib"] = settle(url, report["unloaded_mib"], args.tolerance_mib)
        report["final_pool_mib"] = pool_mib(url)
    finally:
        process.terminate()
        report["server_exit"] = process.wait(timeout=120)

    last = report["cycles"][-1]["memory_mib"] if report["cycles"] else float("nan")
    checks = {
        "every stream complete": report["streams_bad_count"] == 0 and report["streams_ok"] > 0,
        "memory back to the unloaded level":
            abs(report["final_unloaded_mib"] - report["unloaded_mib"]) <= args.tolerance_mib,
        "no growth over the reloads": abs(last - report["loaded_mib"]) <= args.tolerance_mib,
        "server exited 0": report["server_exit"] == 0,
    }
    if report.get("loaded_pool_mib") is not None:
        # The pools' own count: nothing held once the model is unloaded, the same after every
        # reload as after the first load.
        checks["device pools empty after each unload"] = (
            report["unloaded_pool_mib"] == 0 and report["final_pool_mib"] == 0)
        checks["device pools the same after every reload"] = all(
            c["pool_mib"] == report["loaded_pool_mib"] for c in report["cycles"])
    report["checks"] = checks
    source = "the server's RSS" if args.device == "cpu" else "device memory from NVML"
    extra = f" (serve {args.serve_args})" if args.serve_args else ""
    lines = [f"One model on {args.device}{extra}, {args.streams} streaming clients "
             f"({args.max_tokens} tokens each) during {args.cycles} reloads; {source}.", "",
             "| step | device memory MiB | pools MiB | |", "| --- | ---: | ---: | --- |",
             f"| loaded at start | {report['loaded_mib']:.0f} | {fmt(report.get('loaded_pool_mib'))} | |",
             f"| unloaded | {report['unloaded_mib']:.0f} | {fmt(report.get('unloaded_pool_mib'))} | |",
             f"| loaded again | {report['reloaded_first_mib']:.0f} | | load {report['load_s']} s |"]
    for c in report["cycles"]:
        lines.append(f"| reload {c['cycle']} | {c['memory_mib']:.0f} | {fmt(c.get('pool_mib'))} | "
                     f"{c['reload_s']} s, {c['streams_done']} streams done so far |")
    lines.append(f"| unloaded at the end | {report['final_unloaded_mib']:.0f} | "
                 f"{fmt(report.get('final_pool_mib'))} | |")
    lines += ["", f"Streams complete: {report['streams_ok']}, cut or failed: "
              f"{report['streams_bad_count']}.", ""]
    lines += [f"- {name}: {'PASS' if ok else 'FAIL'}" for name, ok in checks.items()]
    table = "\n".join(lines) + "\n"
    print(table)
    if args.json:
        json.dump(report, open(args.json, "w"), indent=1)
    if args.markdown:
        open(args.markdown, "w").write(table)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
