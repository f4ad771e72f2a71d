#!/usr/bin/env python3
"""Load on a running `llamaserve serve`: N concurrent streaming clients, each sending
/v1/completions requests back to back, and what they measure end to end: aggregate output
tokens per second, time to first token (TTFT) and inter-token latency (ITL) percentiles.

Standard library only (it runs on the GPU machine). Every request sends exactly
--prompt-tokens token ids and asks for --max-tokens tokens with ignore_eos, so every run
moves the same work. Clients keep their connection open between requests (as pooled HTTP
clients do); --fresh opens a new connection per request instead.

  python3 bench/serve/serve_load.py --url http://127.0.0.1:8080 --streams 1,16,64,256 \\
      --json load.json

Per stream count it runs --requests-per-stream requests on every stream (at least
--min-requests in all) after one warm-up request, and reports the numbers of that phase.

With --serve "BIN ARGS..." instead of --url it starts that server itself (on a free port,
"--port 0" is added), waits for /ready, measures, and stops it with SIGTERM (a non-zero exit
of the server fails the run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor
from urllib.parse import urlparse


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class Connection:
    """One HTTP/1.1 keep-alive connection that sends streaming completions."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None

    async def stream(self, body: bytes) -> dict:
        """Sends one request; returns ttft_s, token gaps, completion tokens and the status."""
        if self.writer is None:
            await self.open()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        sent = time.perf_counter()
        retried = False
        while True:
            # A pooled connection the server closed while idle fails before any response
            # byte; like HTTP client libraries, send once more on a new connection.
            try:
                self.writer.write(head.encode() + body)
                await self.writer.drain()
                status_line = await self.reader.readline()
            except (ConnectionError, asyncio.IncompleteReadError):
                status_line = b""
            if status_line or retried:
                break
            retried = True
            self.close()
            await self.open()
        if not status_line:
            raise ConnectionError("the server closed the connection without a response")
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if status != 200:
            length = int(headers.get("content-length", "0"))
            text = await self.reader.readexactly(length)
            raise RuntimeError(f"HTTP {status}: {text[:300]!r}")
        if "chunked" not in headers.get("transfer-encoding", ""):
            raise RuntimeError(f"expected a chunked stream, got {headers}")
        first_token = None
        last_token = None
        gaps = []
        usage_tokens = 0
        pending = b""
        done = False
        while not done:
            size = int((await self.reader.readline()).split(b";")[0], 16)
            if size == 0:
                await self.reader.readline()  # end of the (empty) trailer section
                break
            pending += await self.reader.readexactly(size)
            await self.reader.readexactly(2)
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                data = event.partition(b"data: ")[2]
                if data == b"[DONE]":
                    done = True
                    continue
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"]["completion_tokens"]
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    now = time.perf_counter()
                    if first_token is None:
                        first_token = now
                    else:
                        gaps.append(now - last_token)
                    last_token = now
        if done:  # the terminating chunk follows [DONE]
            while (await self.reader.readline()) not in (b"0\r\n",):
                pass
            await self.reader.readline()
        if headers.get("connection", "").lower() == "close":
            self.close()
        return {"ttft_s": (first_token or time.perf_counter()) - sent, "gaps_s": gaps,
                "tokens": usage_tokens, "sent_s": sent, "end_s": time.perf_counter(),
                "retried": retried}


def request_body(args, rng: random.Random) -> bytes:
    prompt = [rng.randrange(1000, 30000) for _ in range(args.prompt_tokens)]
    return json.dumps({"prompt": prompt, "max_tokens": args.max_tokens, "stream": True,
                       "ignore_eos": True, "temperature": 0,
                       "stream_options": {"include_usage": True}}).encode()


def run_streams(args, host: str, port: int, first: int, count: int, per_stream: int,
                fresh: bool) -> list[dict]:
    """`count` streams of `per_stream` requests each, on this process's event loop."""
    results = []

    async def client(index: int) -> None:
        rng = random.Random(index)
        connection = Connection(host, port)
        await connection.open()
        for _ in range(per_stream):
            if fresh:
                connection.close()
                await connection.open()
            results.append(await connection.stream(request_body(args, rng)))
        connection.close()

    async def all_clients() -> None:
        await asyncio.gather(*(client(first + i) for i in range(count)))

    asyncio.run(all_clients())
    return results


def run_phase(args, host: str, port: int, streams: int, fresh: bool) -> dict:
    """One stream count, its streams spread over --client-processes processes so that the
    clients' own parsing never limits what is measured."""
    per_stream = max(args.requests_per_stream, -(-args.min_requests // streams))
    processes = max(1, min(args.client_processes, streams))
    shares = [streams // processes + (1 if i < streams % processes else 0) for i in range(processes)]
    firsts = [sum(shares[:i]) for i in range(processes)]
    with ProcessPoolExecutor(processes) as pool:
        futures = [pool.submit(run_streams, args, host, port, first, count, per_stream, fresh)
                   for first, count in zip(firsts, shares)]
        results = [r for future in futures for r in future.result()]
    wall = max(r["end_s"] for r in results) - min(r["sent_s"] for r in results)
    tokens = sum(r["tokens"] for r in results)
    ttfts = [r["ttft_s"] * 1000 for r in results]
    gaps = [g * 1000 for r in results for g in r["gaps_s"]]
    return {
        "streams": streams, "requests": len(results), "fresh_connections": fresh,
        "client_processes": processes,
        "retried_requests": sum(r["retried"] for r in results),
        "output_tokens": tokens, "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_ms": {"p50": round(percentile(ttfts, 50), 2), "p90": round(percentile(ttfts, 90), 2),
                    "p99": round(percentile(ttfts, 99), 2),
                    "mean": round(statistics.fmean(ttfts), 2)},
        "itl_ms": {"p50": round(percentile(gaps, 50), 2), "p90": round(percentile(gaps, 90), 2),
                   "p99": round(percentile(gaps, 99), 2)},
    }


def measure(args) -> dict:
    url = urlparse(args.url)
    host, port = url.hostname, url.port or 80
    run_streams(args, host, port, -1, 1, 1, False)  # warm-up
    report = {"prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens, "phases": []}
    for streams in args.streams:
        phase = run_phase(args, host, port, streams, fresh=False)
        report["phases"].append(phase)
        print(json.dumps(phase), file=sys.stderr, flush=True)
    if args.compare_fresh:
        for fresh in (False, True):
            phase = run_phase(args, host, port, 1, fresh=fresh)
            phase["label"] = "fresh" if fresh else "pooled"
            report.setdefault("connection_reuse", []).append(phase)
            print(json.dumps(phase), file=sys.stderr, flush=True)
    return report


def markdown(report: dict) -> str:
    lines = [f"Streaming /v1/completions, {report['prompt_tokens']}-token prompts, "
             f"{report['max_tokens']} tokens out.", "",
             "| streams | requests (resent) | tok/s | TTFT p50 / p90 / p99 ms | ITL p50 / p99 ms |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for p in report["phases"]:
        lines.append(f"| {p['streams']} | {p['requests']} ({p['retried_requests']}) | "
                     f"{p['tokens_per_s']} | "
                     f"{p['ttft_ms']['p50']} / {p['ttft_ms']['p90']} / {p['ttft_ms']['p99']} | "
                     f"{p['itl_ms']['p50']} / {p['itl_ms']['p99']} |")
    if report.get("connection_reuse"):
        lines += ["", "| 1 stream, connections | requests | TTFT p50 / p90 ms |",
                  "| --- | ---: | ---: |"]
        for p in report["connection_reuse"]:
            lines.append(f"| {p['label']} | {p['requests']} | {p['ttft_ms']['p50']} / "
                         f"{p['ttft_ms']['p90']} |")
    return "\n".join(lines) + "\n"


def start_server(command: str, log_path: str, timeout_s: float = 600) -> tuple[subprocess.Popen, str]:
    """Starts `command --port 0`; returns the process and its URL once /ready answers 200."""
    log = open(log_path, "wb")
    process = subprocess.Popen([*shlex.split(command), "--port", "0"], stdout=log,
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    url = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}; see {log_path}")
        if url is None:
            text = open(log_path, errors="replace").read()
            match = re.search(r"listening on http://[^:]+:(\d+)", text)
            if match:
                url = f"http://127.0.0.1:{match.group(1)}"
        else:
            try:
                with urllib.request.urlopen(f"{url}/ready", timeout=5) as response:
                    if response.status == 200:
                        return process, url
            except OSError:
                pass
        time.sleep(0.2)
    process.kill()
    raise TimeoutError(f"server not ready within {timeout_s} s; see {log_path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url")
    target.add_argument("--serve", help="start this server command line and measure it")
    parser.add_argument("--server-log", default="serve_load-server.log")
    parser.add_argument("--streams", default="1,16,64,256",
                        type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--min-requests", type=int, default=16)
    parser.add_argument("--client-processes", type=int, default=8,
                        help="processes the streams are spread over")
    parser.add_argument("--compare-fresh", action="store_true",
                        help="also 1 stream with pooled vs fresh connections (TTFT)")
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--markdown", help="write the tables here")
    args = parser.parse_args()
    server = None
    if args.serve:
        server, args.url = start_server(args.serve, args.server_log)
    try:
        report = measure(args)
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=120)
            if code != 0:
                print(f"server exited with {code}; see {args.server_log}", file=sys.stderr)
                return 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
