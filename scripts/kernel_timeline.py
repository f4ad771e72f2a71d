#!/usr/bin/env python3
"""Per-kernel breakdown of steps traced by libkernel_timeline.so (bench/timeline), as they ran.

Unlike Nsight Compute's breakdown (scripts/ncu_breakdown.py), whose kernels run one at a time,
replayed, the timeline keeps what programmatic dependent launch and graphs overlap, so its
columns add up to the step:

  exposed   the time from the end of the kernel that ended before it to its own end, less any
            time in which no kernel ran: what the kernel added to the step (a kernel that
            started early and waited for its producer is charged only for what it ran past it)
  idle      time in which no kernel ran at all (launch gaps, host work)
  run       from the kernel's start to its end, waiting included

    scripts/kernel_timeline.py CSV --steps 4 [--title T] [--bench-json J]
    scripts/kernel_timeline.py CSV --steps 8 --against BASE_CSV [--against-steps 8]

--against puts a baseline's trace (another build, the same case) beside this one: each kernel's
exposed time a step in both and the difference, so that a change's effect on every kernel of
the step shows in one table (kernels only one of them runs have a blank on the other side).

--bench-json (the traced run's own `llamaserve bench --json-file`) adds the time of the case's
timed steps, traced too. CUPTI's records cost most between steps (the idle time grows), a
little within them: compare the kernels' span, not the traced step, with an untraced run.
"""
import argparse
import collections
import csv
import json
import re
import sys


def short_name(name):
    name = re.sub(r"llamaserve::cuda::|\(anonymous namespace\)::|llamaserve::", "", name)
    # Drop the parameter list (the last top-level parenthesis group), keep template arguments.
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        c = name[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return name[:i] if i > 0 else name
    return name


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append((int(r["start_ns"]), int(r["end_ns"]), short_name(r["kernel"])))
    return rows


def breakdown(rows):
    """Per kernel name: launches, exposed ns, run ns; and the idle ns and the window."""
    rows = sorted(rows, key=lambda r: r[1])
    window_start = min(r[0] for r in rows)
    exposed = collections.Counter()
    run = collections.Counter()
    launches = collections.Counter()
    idle = 0
    prev_end = window_start
    # Running intervals merged in start order, to find when nothing ran between two ends.
    by_start = sorted(rows)
    busy = []
    for s, e, _ in by_start:
        if busy and s <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], e)
        else:
            busy.append([s, e])

    def idle_between(a, b):
        """Nanoseconds in (a, b) covered by no kernel."""
        covered = 0
        for s, e in busy:
            lo, hi = max(s, a), min(e, b)
            if hi > lo:
                covered += hi - lo
        return (b - a) - covered

    for s, e, name in rows:
        launches[name] += 1
        run[name] += e - s
        if e <= prev_end:
            continue
        gap = idle_between(prev_end, e)
        idle += gap
        exposed[name] += (e - prev_end) - gap
        prev_end = e
    return launches, exposed, run, idle, prev_end - window_start


def compare(base_rows, base_steps, rows, steps, title):
    """Markdown: each kernel's launches and exposed us a step, baseline against this trace."""
    b_launches, b_exposed, _, b_idle, b_window = breakdown(base_rows)
    launches, exposed, _, idle, window = breakdown(rows)
    names = list(dict.fromkeys(
        [n for n, _ in b_exposed.most_common()] + [n for n, _ in exposed.most_common()] +
        list(b_launches) + list(launches)))

    def us(counter, name, n):
        return counter[name] / n / 1000

    out = [f"### {title}", "",
           f"step {b_window / base_steps / 1000:.1f} -> {window / steps / 1000:.1f} us traced, "
           f"kernels' span {(b_window - b_idle) / base_steps / 1000:.1f} -> "
           f"{(window - idle) / steps / 1000:.1f} us", "",
           "| kernel | launches/step | exposed us/step, baseline | this | difference |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for name in names:
        before = f"{us(b_exposed, name, base_steps):.1f}" if name in b_launches else ""
        after = f"{us(exposed, name, steps):.1f}" if name in launches else ""
        diff = us(exposed, name, steps) - us(b_exposed, name, base_steps)
        count = (f"{b_launches[name] / base_steps:.0f}" if name in b_launches else "-") + " / " + (
            f"{launches[name] / steps:.0f}" if name in launches else "-")
        out.append(f"| `{name}` | {count} | {before} | {after} | {diff:+.1f} |")
    out.append(f"| (no kernel running) | | {b_idle / base_steps / 1000:.1f} | "
               f"{idle / steps / 1000:.1f} | {(idle / steps - b_idle / base_steps) / 1000:+.1f} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, required=True, help="steps in the traced range")
    ap.add_argument("--title", default="traced steps")
    ap.add_argument("--bench-json", help="bench JSON of the same case (untraced step time)")
    ap.add_argument("--case", default="decode b1", help="the bench case's name prefix")
    ap.add_argument("--against", help="a baseline's CSV of the same case, tabulated beside")
    ap.add_argument("--against-steps", type=int, help="its steps (default --steps)")
    args = ap.parse_args()
    rows = load(args.csv)
    if not rows:
        sys.exit(f"{args.csv}: no kernels in the profiler range")
    if args.against:
        base = load(args.against)
        if not base:
            sys.exit(f"{args.against}: no kernels in the profiler range")
        print(compare(base, args.against_steps or args.steps, rows, args.steps, args.title))
        return
    launches, exposed, run, idle, window = breakdown(rows)
    n = args.steps
    step_us = window / n / 1000
    out = [f"### {args.title}", ""]
    line = (f"{len(rows) / n:.0f} kernel launches a step; traced step {step_us:.1f} us "
            f"(first kernel's start to last kernel's end over {n} steps), of which no kernel "
            f"running {idle / n / 1000:.1f} us ({100 * idle / window:.1f}%), kernels' span "
            f"{(window - idle) / n / 1000:.1f} us")
    if args.bench_json:
        report = json.load(open(args.bench_json))
        case = next((c for c in report["cases"] if c["name"].startswith(args.case)), None)
        if case:
            line += (f"; the same run's timed steps (traced too) "
                     f"{case['ms_per_token'] * 1000:.1f} us")
    out += [line, ""]
    out.append("| kernel | launches/step | exposed us/step | % of step | run us/launch |")
    out.append("| --- | ---: | ---: | ---: | ---: |")
    for name, ns in exposed.most_common():
        out.append(f"| `{name}` | {launches[name] / n:.0f} | {ns / n / 1000:.1f} | "
                   f"{100 * ns / window:.1f}% | {run[name] / launches[name] / 1000:.2f} |")
    for name in launches:
        if name not in exposed:
            out.append(f"| `{name}` | {launches[name] / n:.0f} | 0.0 | 0.0% | "
                       f"{run[name] / launches[name] / 1000:.2f} |")
    out.append(f"| (no kernel running) | | {idle / n / 1000:.1f} | {100 * idle / window:.1f}% | |")
    print("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
