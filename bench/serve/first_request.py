#!/usr/bin/env python3
"""The first requests after /ready: for each of --runs fresh servers (--serve "BIN ARGS..."),
the time to the first token of the first streamed completion after /ready answers 200 and of
the --requests - 1 that follow, one at a time, each a fresh --prompt-tokens-token prompt
(random ids, so that no prompt shares a cached prefix with another). A first request slower
than the rest is work the warm-up left to it (kernel loading, graph capture, first touches).

Standard library only (it runs on the GPU machine); serve_load.py's client and server start.

  python3 bench/serve/first_request.py --serve "build/src/cli/llamaserve serve -m M.gguf \\
      --device cuda:0" --runs 2 --json first.json --markdown first.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import Connection, start_server  # noqa: E402


async def ttfts(url: str, args, rng: random.Random) -> list[float]:
    parsed = urlparse(url)
    out = []
    for _ in range(args.requests):
        prompt = [rng.randrange(1000, 30000) for _ in range(args.prompt_tokens)]
        body = json.dumps({"prompt": prompt, "max_tokens": args.max_tokens, "stream": True,
                           "ignore_eos": True, "temperature": 0}).encode()
        connection = Connection(parsed.hostname, parsed.port)
        result = await connection.stream(body)
        connection.close()
        out.append(result["ttft_s"] * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", required=True, help="the server command line")
    parser.add_argument("--runs", type=int, default=2, help="fresh servers, one after another")
    parser.add_argument("--requests", type=int, default=10, help="requests per server")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--server-log", default="first_request-server.log")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    rng = random.Random(7)
    runs = []
    for run in range(args.runs):
        log = f"{args.server_log}.{run}" if args.runs > 1 else args.server_log
        started = time.monotonic()
        server, url = start_server(args.serve, log)
        ready_s = time.monotonic() - started
        try:
            values = asyncio.run(ttfts(url, args, rng))
        finally:
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=120)
        if code != 0:
            print(f"server exited with {code}; see {log}", file=sys.stderr)
            return 1
        runs.append({"ready_s": round(ready_s, 1), "ttft_ms": [round(v, 2) for v in values],
                     "first_ms": round(values[0], 2),
                     "later_median_ms": round(statistics.median(values[1:]), 2)
                     if len(values) > 1 else None})
    report = {"command": args.serve, "prompt_tokens": args.prompt_tokens,
              "max_tokens": args.max_tokens, "requests": args.requests, "runs": runs}
    lines = [f"Server: `{args.serve}`; {args.requests} streamed completions of "
             f"{args.prompt_tokens}-token prompts, one at a time, from /ready on.", "",
             "| run | ready after (s) | first TTFT (ms) | later TTFT median (ms) | all TTFTs (ms) |",
             "| ---: | ---: | ---: | ---: | --- |"]
    for i, run in enumerate(runs):
        lines.append(f"| {i + 1} | {run['ready_s']} | {run['first_ms']} | "
                     f"{run['later_median_ms']} | {', '.join(str(v) for v in run['ttft_ms'])} |")
    text = "\n".join(lines) + "\n"
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
