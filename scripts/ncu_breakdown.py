#!/usr/bin/env python3
"""Where the time of a profiled forward pass goes, per kernel, from Nsight Compute's CSV.

Input: the output of
    ncu --csv --print-units base --clock-control none --profile-from-start off \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        llamaserve bench ... --profile-steps N
(one row per kernel launch and metric). Kernels are grouped by name (template arguments kept,
parameters dropped); per group: launches and time per step, share of the profiled time, DRAM
bytes and achieved bandwidth, against the copy bandwidth given with --copy-gbps.

    scripts/ncu_breakdown.py ncu.csv --steps 4 --copy-gbps 4290 [--title T] [--step-ms 4.5]
"""
import argparse
import collections
import csv
import re
import sys


def short_name(name: str) -> str:
    # "void llamaserve::cuda::matvec_kernel<(TensorType)1, 1, 4, 6>(MatvecLaunch)" ->
    # "matvec_kernel<(TensorType)1, 1, 4, 6>"
    name = re.sub(r"^void ", "", name.strip())
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name = name[:i]
            break
    name = re.sub(r"\b(llamaserve::)?(cuda::)?(\(anonymous namespace\)::)?", "", name)
    name = name.replace("llamaserve::TensorType", "TensorType")
    return name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, required=True, help="forward passes profiled")
    ap.add_argument("--copy-gbps", type=float, default=0.0, help="measured copy bandwidth")
    ap.add_argument("--step-ms", type=float, default=0.0,
                    help="the step's time measured without the profiler (for the idle gap)")
    ap.add_argument("--title", default="")
    args = ap.parse_args()

    with open(args.csv, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # drop ncu's ==PROF== lines
    rows = list(csv.DictReader(lines))
    if not rows:
        print(f"{args.csv}: no profiled kernels", file=sys.stderr)
        return 1
    per_launch = collections.defaultdict(dict)  # launch id -> metric -> value
    names = {}
    for r in rows:
        launch = r["ID"]
        names[launch] = short_name(r["Kernel Name"])
        value = r["Metric Value"].replace(",", "")
        try:
            per_launch[launch][r["Metric Name"]] = float(value)
        except ValueError:
            pass
    groups = collections.OrderedDict()
    for launch, metrics in per_launch.items():
        g = groups.setdefault(names[launch], {"n": 0, "ns": 0.0, "read": 0.0, "write": 0.0})
        g["n"] += 1
        g["ns"] += metrics.get("gpu__time_duration.sum", 0.0)
        g["read"] += metrics.get("dram__bytes_read.sum", 0.0)
        g["write"] += metrics.get("dram__bytes_write.sum", 0.0)
    total_ns = sum(g["ns"] for g in groups.values())
    total_bytes = sum(g["read"] + g["write"] for g in groups.values())
    steps = args.steps
    if args.title:
        print(f"### {args.title}\n")
    print(f"{len(per_launch) // steps} kernel launches per step; kernel time per step "
          f"{total_ns / steps / 1e3:.1f} us, DRAM traffic per step {total_bytes / steps / 1e9:.3f} GB"
          + (f" ({total_bytes / total_ns:.0f} GB/s over the kernel time"
             f", {100 * total_bytes / total_ns / args.copy_gbps:.1f}% of copy)" if args.copy_gbps else ""))
    if args.step_ms > 0:
        gap = args.step_ms * 1e3 - total_ns / steps / 1e3
        print(f"\nmeasured step without the profiler {args.step_ms * 1e3:.1f} us: "
              f"{gap:.1f} us ({100 * gap / (args.step_ms * 1e3):.1f}%) outside kernels "
              "(launch gaps, host work, copies)")
    print()
    print("| kernel | launches/step | us/step | % of kernel time | MB/step | GB/s | % of copy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, g in sorted(groups.items(), key=lambda kv: -kv[1]["ns"]):
        moved = g["read"] + g["write"]
        gbps = moved / g["ns"] if g["ns"] > 0 else 0.0
        pct_copy = f"{100 * gbps / args.copy_gbps:.1f}%" if args.copy_gbps else "-"
        print(f"| `{name}` | {g['n'] / steps:g} | {g['ns'] / steps / 1e3:.1f} | "
              f"{100 * g['ns'] / total_ns:.1f}% | {moved / steps / 1e6:.1f} | {gbps:.0f} | {pct_copy} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
