#!/usr/bin/env python3
"""The cost of `llamaserve loadtest` itself, against bench/loadtest/fake_sse_server.py:

1. timing: streams of events sent a fixed --interval-ms apart; the ITL the tool measures
   against that true interval, at several concurrencies (the error includes the fake server's
   own scheduling jitter, so it bounds the tool's from above);
2. throughput: events sent back to back (interval 0) on 256 streams; the events per second
   the tool took in and its own CPU time per event (user + system, from wait4), which is what
   bounds the event rate one core of the tool can follow.

  python3 bench/loadtest/overhead.py --bin build/cpu/src/cli/llamaserve

prints a markdown report on stdout. Everything runs on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def start_fake(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(HERE / "fake_sse_server.py"), "--port", "0",
                             "--seconds", "900", *args], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    match = re.search(r"listening on (http://\S+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return proc, match.group(1)


def run_loadtest(binary: str, url: str, out: Path, *args: str) -> tuple[dict, float, float]:
    """Runs one loadtest; returns its report, wall seconds and CPU seconds (user + system)."""
    command = [binary, "loadtest", "--url", url, "--out", str(out), "--progress", "none",
               "--gnuplot", "/nonexistent-gnuplot", *args]
    print("$ " + " ".join(command), file=sys.stderr)
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"loadtest exited with {status}")
    report = json.loads((out / "report.json").read_text())
    return report, wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default="build/cpu/src/cli/llamaserve")
    parser.add_argument("--interval-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", default="1,64,256")
    parser.add_argument("--timing-tokens", type=int, default=50)
    parser.add_argument("--throughput-tokens", type=int, default=1000)
    parser.add_argument("--throughput-requests", type=int, default=512)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loadtest-overhead-"))

    print(f"## Timing: events {args.interval_ms:g} ms apart\n")
    print("| streams | requests | events | ITL p50 ms | ITL p90 ms | ITL p99 ms | ITL max ms | "
          "p50 error | tool CPU s | tool CPU per event us |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    fake, url = start_fake("--interval-ms", str(args.interval_ms))
    try:
        for streams in [int(c) for c in args.concurrency.split(",")]:
            requests = max(2 * streams, 16)
            report, _, cpu = run_loadtest(args.bin, url, work / f"timing-{streams}", "-c",
                                          str(streams), "--requests", str(requests),
                                          "--output-tokens", str(args.timing_tokens),
                                          "--warmup-requests", "0")
            step = report["steps"][0]
            itl = step["itl_ms"]
            events = step["output_tokens"]
            print(f"| {streams} | {step['ok']} | {events} | {itl['p50']:.2f} | {itl['p90']:.2f} | "
                  f"{itl['p99']:.2f} | {itl['max']:.2f} | {itl['p50'] - args.interval_ms:+.2f} | "
                  f"{cpu:.2f} | {1e6 * cpu / max(events, 1):.1f} |")
    finally:
        fake.kill()

    print("\n## Throughput: events back to back, 256 streams\n")
    fake, url = start_fake("--interval-ms", "0")
    try:
        report, wall, cpu = run_loadtest(args.bin, url, work / "throughput", "-c", "256",
                                         "--requests", str(args.throughput_requests),
                                         "--output-tokens", str(args.throughput_tokens),
                                         "--warmup-requests", "0")
    finally:
        fake.kill()
    step = report["steps"][0]
    events = step["output_tokens"]
    print("| streams | requests ok | events | step s | events/s taken in | tool CPU s | "
          "tool CPU per event us | events/s per core of the tool |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| 256 | {step['ok']} | {events} | {step['elapsed_s']:.2f} | "
          f"{step['output_tokens_per_s']:.0f} | {cpu:.2f} | {1e6 * cpu / events:.2f} | "
          f"{events / cpu:.0f} |")
    print(f"\n(wall time of the whole throughput run {wall:.1f} s; reports in {work})")


if __name__ == "__main__":
    main()
