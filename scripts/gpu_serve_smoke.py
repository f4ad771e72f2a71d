#!/usr/bin/env python3
"""The server on GPUs end to end, for the GPU machine (scripts/device_run.sh step `serve`).

For each layout given (default: one GPU, tensor parallel over two, two replicas), starts
`llamaserve serve` on a small model, waits for /ready, streams completions from several
threads at once, checks that /metrics has the NVML GPU series of every device in use and the
per-replica series, and that SIGTERM ends the server with status 0. Exits 1 on any failure.

  scripts/gpu_serve_smoke.py BIN MODEL [LAYOUT ...]     LAYOUT: "--devices 0,1 --tp 2"
"""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 10) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def stream_completion(base: str, prompt: str, out: list, index: int) -> None:
    body = json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0, "stream": True}).encode()
    request = urllib.request.Request(base + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    text, done = "", False
    with urllib.request.urlopen(request, timeout=120) as r:
        for line in r:
            line = line.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunk = json.loads(line[6:])
                text += chunk["choices"][0].get("text", "")
    out[index] = (done, text)


def check_layout(binary: str, model: str, layout: list[str]) -> list[str]:
    problems = []
    port = free_port()
    devices = layout[layout.index("--devices") + 1].split(",") if "--devices" in layout else ["0"]
    replicas = int(layout[layout.index("--replicas") + 1]) if "--replicas" in layout else 1
    server = subprocess.Popen([binary, "serve", "-m", model, "--port", str(port), "--ctx-size", "256",
                               "--max-running", "8", *layout],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(server.stdout), daemon=True)
    reader.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if get(base + "/ready", 2)[0] == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None:
                break
            time.sleep(0.5)
        else:
            problems.append("not ready within 180 s")
        if server.poll() is not None:
            reader.join(timeout=5)
            problems.append(f"server exited early with {server.returncode}")
            print("".join(log[-40:]))
            return problems
        results: list = [None] * 8
        threads = [threading.Thread(target=stream_completion, args=(base, f"Once upon a time {i % 2}", results, i))
                   for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, r in enumerate(results):
            if r is None or not r[0] or not r[1]:
                problems.append(f"stream {i}: {r!r}")
        # Greedy: the same prompt gives the same text on whichever replica served it.
        if results[0] and results[2] and results[0][1] != results[2][1]:
            problems.append(f"greedy texts differ: {results[0][1]!r} vs {results[2][1]!r}")
        status, metrics = get(base + "/metrics")
        if status != 200:
            problems.append(f"/metrics answered {status}")
        for d in (d for d in devices if d != "cpu"):
            for name in ("llamaserve_gpu_memory_used_bytes", "llamaserve_gpu_memory_total_bytes",
                         "llamaserve_gpu_utilization_percent", "llamaserve_gpu_temperature_celsius"):
                if f'{name}{{device="{d}"}}' not in metrics:
                    problems.append(f"/metrics lacks {name} for device {d}")
        for r in range(replicas):
            if f'replica="{r}"' not in metrics:
                problems.append(f"/metrics lacks replica=\"{r}\" series")
        used = [l for l in metrics.splitlines() if l.startswith("llamaserve_gpu_memory_used_bytes")]
        print("   ", " | ".join(used))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=60)
            if code != 0:
                problems.append(f"exit status {code} after SIGTERM")
        except subprocess.TimeoutExpired:
            server.kill()
            problems.append("did not exit within 60 s of SIGTERM")
        reader.join(timeout=5)
    if problems:
        print("".join(log[-40:]))
    return problems


def visible_gpus() -> int:
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))


def main() -> int:
    binary, model = sys.argv[1], sys.argv[2]
    layouts = [a.split() for a in sys.argv[3:]] or [["--devices", "0"], ["--devices", "0,1", "--tp", "2"],
                                                   ["--devices", "0,1", "--replicas", "2"]]
    visible = visible_gpus()
    failed = False
    for layout in layouts:
        needed = len(layout[layout.index("--devices") + 1].split(",")) if "--devices" in layout else 1
        if needed > visible:
            print(f"serve {' '.join(layout)}: skipped (needs {needed} GPUs, {visible} visible)")
            continue
        problems = check_layout(binary, model, layout)
        print(f"serve {' '.join(layout)}: {'ok' if not problems else 'FAILED'}")
        for p in problems:
            print("   ", p)
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
