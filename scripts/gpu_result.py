#!/usr/bin/env python3
"""Writes a bench/results file from what one `scripts/device_run.sh` call handed back.

    scripts/gpu_result.py --out-dir DIR --title "..." --command "..." [--note "..."]... \
        -o bench/results/DATE-NAME.md [--raw-name DATE-NAME]

DIR is the folder the device tool copied $OUT to. The file gets a header (date, commit,
command, device), the step summary, and every table the run wrote (bench-7b.md, bench-multi.md,
bench-replicas.md, profile-7b.md, kernels.md, all-reduce.md, and any other *.md in DIR or in a
folder of DIR), each under its file name, unedited. With --raw-name every archive of logs in
DIR (logs.tar.gz, or a script's own) is copied to bench/results/raw/RAW-NAME-<archive>, and every
JSON result to RAW-NAME-<path>.json, named in the header. Numbers are never typed in: rerun the
device call to change them.
"""
import argparse
import datetime
import pathlib
import shutil
import subprocess
import sys

KNOWN = ["bench-7b.md", "bench-multi.md", "bench-replicas.md", "profile-7b.md", "kernels.md",
         "all-reduce.md"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out-dir", required=True, type=pathlib.Path)
    ap.add_argument("--title", required=True)
    ap.add_argument("--command", required=True, help="the command run on the device")
    ap.add_argument("--note", action="append", default=[], help="a line for the header (repeatable)")
    ap.add_argument("--commit", help="the commit the carried binaries were built from "
                    "(default: HEAD when this file is written, said so)")
    ap.add_argument("--raw-name", help="copy DIR's *.tar.gz to bench/results/raw/RAW-NAME-<name>")
    ap.add_argument("-o", "--output", required=True, type=pathlib.Path)
    args = ap.parse_args()

    out = args.out_dir
    if not (out / "summary.txt").exists():
        print(f"{out}: no summary.txt (not a device_run.sh output folder)", file=sys.stderr)
        return 1
    root = pathlib.Path(__file__).resolve().parent.parent
    rev = args.commit or "HEAD"
    commit = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %s", rev],
                            capture_output=True, text=True).stdout.strip()
    if len(commit) > 110:
        commit = commit[:107] + "..."
    dirty = not args.commit and subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True).stdout.strip()
    stamp = datetime.datetime.fromtimestamp((out / "summary.txt").stat().st_mtime,
                                            datetime.timezone.utc)
    lines = [f"# {args.title}", "",
             f"- date: {stamp:%Y-%m-%d %H:%M} UTC (when the run's summary was written)",
             f"- commit: {commit}" + ("" if args.commit else " (HEAD when this file was written)")
             + (" (with uncommitted changes)" if dirty else ""),
             f"- command (on the device): `{args.command}`"]
    lines += [f"- {note}" for note in args.note]
    if args.raw_name:
        raw_dir = root / "bench" / "results" / "raw"
        raw_dir.mkdir(parents=True, exist_ok=True)
        # Archives of logs: device_run.sh's logs.tar.gz, and any a script of several steps packed.
        for archive in sorted(out.glob("*.tar.gz")):
            raw = raw_dir / f"{args.raw_name}-{archive.name}"
            shutil.copyfile(archive, raw)
            raw.chmod(0o644)
            lines.append(f"- raw logs: raw/{raw.name}")
        # Machine-readable results (bench --json, loadtest's report.json) beside the logs.
        for result in sorted(out.rglob("*.json")):
            name = "-".join(result.relative_to(out).parts)
            kept = raw_dir / f"{args.raw_name}-{name}"
            shutil.copyfile(result, kept)
            kept.chmod(0o644)
            lines.append(f"- raw results: raw/{kept.name}")
    lines += ["", "## Step summary", "", "```", (out / "summary.txt").read_text().rstrip(), "```"]
    tables = [out / name for name in KNOWN if (out / name).exists()]
    tables += sorted(p for p in out.glob("*.md") if p.name not in KNOWN)
    tables += sorted(out.glob("*/**/*.md"))  # a step's own folders, e.g. loadtest-7b/report.md
    for table in tables:
        name = "/".join(table.relative_to(out).parts)
        lines += ["", f"## {name} (unedited)", "", table.read_text().rstrip()]
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
