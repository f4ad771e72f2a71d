#!/usr/bin/env python3
"""The engine's steps by kind between two scrapes of a llamaserve server's /metrics.

    bench/serve/step_durations.py BEFORE.txt AFTER.txt [--markdown OUT.md]

Reads the histogram llamaserve_engine_step_duration_seconds{kind} (decode: decodes only,
mixed: decodes beside prompt chunks, prompt: prompt chunks only) from both scrapes and prints
per kind the steps taken between them, their mean, p50 / p90 / p99 interpolated within the
buckets as Prometheus's histogram_quantile does, and their share of all the steps' time. A
missing or empty BEFORE counts from the server's start. A stream's inter-token gap is its
step's, so the kinds show where an inter-token latency tail comes from.
"""
import argparse
import math
import pathlib
import re
import sys

METRIC = "llamaserve_engine_step_duration_seconds"
LINE = re.compile(METRIC + r"_(bucket|count|sum)\{([^}]*)\}\s+(\S+)")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse(text: str) -> dict:
    """{kind: {"buckets": {upper bound: cumulative count}, "count": n, "sum": seconds}}."""
    kinds: dict = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        part, labels, value = match.groups()
        labels = dict(LABEL.findall(labels))
        kind = kinds.setdefault(labels.get("kind", ""), {"buckets": {}, "count": 0.0, "sum": 0.0})
        if part == "bucket":
            kind["buckets"][math.inf if labels["le"] == "+Inf" else float(labels["le"])] = float(value)
        else:
            kind[part] = float(value)
    return kinds


def difference(after: dict, before: dict) -> dict:
    out = {}
    for name, now in after.items():
        then = before.get(name, {"buckets": {}, "count": 0.0, "sum": 0.0})
        out[name] = {
            "buckets": {le: n - then["buckets"].get(le, 0.0) for le, n in now["buckets"].items()},
            "count": now["count"] - then["count"],
            "sum": now["sum"] - then["sum"],
        }
    return out


def quantile(q: float, buckets: dict) -> float:
    """histogram_quantile over cumulative buckets: linear within the bucket that holds rank
    q * total, the lowest bucket from 0; a rank in the +Inf bucket gives the largest bound."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for upper in bounds:
        count = buckets[upper]
        if count >= rank:
            if math.isinf(upper):
                return lower
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


def table(kinds: dict) -> str:
    all_seconds = sum(k["sum"] for k in kinds.values())
    rows = ["| step kind | steps | mean ms | p50 ms | p90 ms | p99 ms | share of step time |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in ("decode", "mixed", "prompt"):
        kind = kinds.get(name)
        if kind is None or kind["count"] <= 0:
            rows.append(f"| {name} | 0 | - | - | - | - | - |")
            continue
        p = [1e3 * quantile(q, kind["buckets"]) for q in (0.5, 0.9, 0.99)]
        share = kind["sum"] / all_seconds if all_seconds > 0 else 0.0
        rows.append(f"| {name} | {int(kind['count'])} | {1e3 * kind['sum'] / kind['count']:.2f} | "
                    f"{p[0]:.2f} | {p[1]:.2f} | {p[2]:.2f} | {100 * share:.1f}% |")
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("before", type=pathlib.Path)
    ap.add_argument("after", type=pathlib.Path)
    ap.add_argument("--markdown", type=pathlib.Path, help="also write the table to this file")
    args = ap.parse_args()
    after = parse(args.after.read_text())
    if not after:
        print(f"{args.after}: no {METRIC} series (not a llamaserve /metrics scrape?)",
              file=sys.stderr)
        return 1
    before = parse(args.before.read_text()) if args.before.exists() else {}
    text = ("Engine steps between the two scrapes (quantiles interpolated within the "
            "buckets of llamaserve_engine_step_duration_seconds)\n\n" + table(difference(after, before)))
    print(text, end="")
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
