#!/usr/bin/env python3
"""Sums the JUnit reports of a test run and prints the closing line 'N passed, N failed'.

Usage: test_summary.py REPORT_DIR STAGE_FAILURES. A stage that failed without producing test
results (a build, the fuzzer) counts as one failed test. Exits 1 when anything failed.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def count(path, failures):
    """Counts the test cases of one report; appends 'report: test: first message line' per
    failed case to `failures`."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
    total = failed = skipped = 0
    for suite in suites:
        for case in suite.iter("testcase"):
            total += 1
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                failed += 1
                message = (problem.get("message") or problem.text or "").strip().splitlines()
                name = ".".join(n for n in (case.get("classname"), case.get("name")) if n)
                failures.append(f"{path.name}: {name}: {message[0][:300] if message else ''}")
            elif case.find("skipped") is not None:
                skipped += 1
    return total, failed, skipped


def main():
    report_dir = pathlib.Path(sys.argv[1])
    stage_failures = int(sys.argv[2])
    passed = failed = skipped = 0
    failures = []
    for path in sorted(report_dir.glob("*.xml")):
        try:
            total, f, s = count(path, failures)
        except ET.ParseError as error:
            print(f"unreadable report {path.name}: {error}")
            failed += 1
            continue
        print(f"{path.name}: {total - f - s} passed, {f} failed, {s} skipped")
        passed += total - f - s
        failed += f
        skipped += s
    # A failed stage whose failures already show as failed tests is not counted twice.
    stages = report_dir / "failed-stages.txt"
    names = stages.read_text().split("\n") if stages.exists() else []
    names = [n for n in names if n]
    test_stages = [n for n in names if "tests" in n]
    other = len(names) - len(test_stages)
    if failed == 0 and test_stages:
        other += len(test_stages)  # a test stage failed without a failing test: count it
    failed += other
    for line in failures:
        print("FAILED " + line)
    if names:
        print("failed stages: " + "; ".join(names))
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
