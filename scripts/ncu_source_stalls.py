#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's source page in SASS, as markdown.

The page comes from a report taken with the full set (its warp-state sampling):

    ncu --set full --import-source no -o REPORT ...
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > PAGE.csv
    scripts/ncu_source_stalls.py PAGE.csv[.gz] [--top 25] > stalls.md

For each kernel launch of the page (in launch order): the samples by stall reason; the spans of consecutive
instructions that ran the same number of times (the prologue, a loop's body, the epilogue:
by their counts) with at least 1% of the samples; and the instructions with the most samples,
each with its two main reasons.
"""
import argparse
import collections
import csv
import gzip
import itertools
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def kernels(path):
    opener = gzip.open if path.endswith(".gz") else open
    result, rows, header = [], None, None
    with opener(path, "rt", newline="") as f:
        for record in csv.reader(f):
            if not record:
                continue
            if record[0] == "Kernel Name":
                rows, header = [], None
                result.append((record[1], rows))
            elif record[0] == "Address":
                header = record
            elif rows is not None and header:
                rows.append(dict(zip(header, record)))
    return result


def number(text):
    try:
        return float(text)
    except ValueError:
        return 0.0


def report(name, rows, top):
    total = sum(number(r[SAMPLES]) for r in rows)
    print(f"### {name}\n")
    if total == 0:
        print("no samples\n")
        return
    reasons = [k for k in rows[0] if k.startswith("stall_") and "(Not Issued)" not in k]
    by_reason = collections.Counter()
    for r in rows:
        for k in reasons:
            by_reason[k] += number(r[k])
    print(f"{len(rows)} instructions, {total:.0f} samples; by reason: " +
          ", ".join(f"{k[6:]} {v / total:.1%}" for k, v in by_reason.most_common(8)) + "\n")
    print("| instructions | executed a time | samples |\n| --- | ---: | ---: |")
    for executed, group in itertools.groupby(enumerate(rows), key=lambda x: x[1][EXECUTED]):
        group = list(group)
        samples = sum(number(r[SAMPLES]) for _, r in group)
        if samples / total >= 0.01:
            print(f"| {group[0][0]}-{group[-1][0]} | {executed} | {samples / total:.1%} |")
    print(f"\n| # | samples | executed | instruction | main reasons |\n| ---: | ---: | ---: | --- | --- |")
    ranked = sorted(range(len(rows)), key=lambda i: -number(rows[i][SAMPLES]))[:top]
    for i in sorted(ranked):
        r = rows[i]
        main = sorted(((number(r[k]), k[6:]) for k in reasons), reverse=True)[:2]
        why = ", ".join(f"{k} {v:.0f}" for v, k in main if v > 0)
        print(f"| {i} | {number(r[SAMPLES]) / total:.1%} | {r[EXECUTED]} | "
              f"`{r['Source'].strip()}` | {why} |")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("page", help="the source page as CSV (.gz allowed)")
    parser.add_argument("--top", type=int, default=25, help="instructions listed a kernel")
    args = parser.parse_args()
    found = kernels(args.page)
    if not found:
        sys.exit(f"{args.page}: no kernel in this page")
    # The page may list a launch twice in a row; each launch is reported once.
    unique = [k for i, k in enumerate(found) if i == 0 or k != found[i - 1]]
    for name, rows in unique:
        report(name, rows, args.top)


if __name__ == "__main__":
    main()
