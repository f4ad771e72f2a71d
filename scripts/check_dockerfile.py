#!/usr/bin/env python3
"""Structural checks of Dockerfiles that cannot be built here (no linter such as hadolint is
packaged for Debian).

Usage: check_dockerfile.py [--configure] DOCKERFILE...   (paths relative to the repository
root, which is the build context)

Checks: every stage is named (FROM ... AS name) and its base's ARGs are declared before the
first FROM; COPY --from names an earlier stage; every other COPY source exists in the
repository and is let through .dockerignore; the last stage (the image) has a non-root
numeric USER, EXPOSE, a HEALTHCHECK in exec form, STOPSIGNAL SIGTERM, and ENTRYPOINT and CMD
in exec form (JSON arrays, so that the server gets the signals as PID 1's child); RUN apt-get
install lines use --no-install-recommends; and for a Debian build stage every package is one
of scripts/setup.sh's serve_packages (the two lists cannot drift apart). With --configure, also copies
only what the build stage COPYs into a scratch folder and runs the build stage's
`cmake --preset ...` configure command there (ARGs at their defaults), so that a file the
configure needs but the image leaves out fails here; the cuda preset only where
/usr/local/cuda/bin/nvcc exists. Exits 1 if any check failed.
"""
from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments) with continuation lines joined."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((start, word.upper(), rest.strip()))
        buf = ""
    return out


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps `path` out of the context (last matching rule wins)."""
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pat) for p in prefixes):
            result = not negate
    return result


def is_exec_form(args: str) -> bool:
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return False
    return isinstance(value, list) and all(isinstance(v, str) for v in value) and bool(value)


def setup_packages() -> set[str]:
    text = (ROOT / "scripts/setup.sh").read_text()
    m = re.search(r"serve_packages=\((.*?)\)", text, re.S)
    return set(m.group(1).split()) if m else set()


def check_file(path: str) -> list[str]:
    errors: list[str] = []
    text = (ROOT / path).read_text()
    dockerignore = ROOT / ".dockerignore"
    patterns = [l.strip() for l in dockerignore.read_text().splitlines()
                if l.strip() and not l.startswith("#")] if dockerignore.exists() else []
    stages: list[dict] = []
    global_args: set[str] = set()
    for line, word, args in instructions(text):
        if word == "ARG" and not stages:
            global_args.add(args.split("=")[0].strip())
            continue
        if word == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)\s+AS\s+(\S+)$", args, re.I)
            if not m:
                errors.append(f"{path}:{line}: FROM without a stage name (FROM image AS name)")
                stages.append({"name": f"#{len(stages)}", "ins": []})
                continue
            for var in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", m.group(1)):
                if var not in global_args:
                    errors.append(f"{path}:{line}: FROM uses ${var}, not declared before the first FROM")
            stages.append({"name": m.group(2), "ins": []})
            continue
        if not stages:
            errors.append(f"{path}:{line}: {word} before the first FROM")
            continue
        stages[-1]["ins"].append((line, word, args))
    if not stages:
        return errors + [f"{path}: no FROM"]
    names = [s["name"] for s in stages]
    if len(set(names)) != len(names):
        errors.append(f"{path}: stage names repeat: {names}")
    known = setup_packages()
    for i, stage in enumerate(stages):
        for line, word, args in stage["ins"]:
            if word in ("COPY", "ADD"):
                words = shlex.split(args) if not args.startswith("[") else json.loads(args)
                opts = [w for w in words if w.startswith("--")]
                paths = [w for w in words if not w.startswith("--")]
                srcs = paths[:-1]
                source_stage = next((o.split("=", 1)[1] for o in opts if o.startswith("--from=")), None)
                if word == "ADD":
                    errors.append(f"{path}:{line}: ADD; use COPY")
                if source_stage is not None:
                    if source_stage not in names[:i]:
                        errors.append(f"{path}:{line}: COPY --from={source_stage}: no earlier stage of that name")
                    continue
                for src in srcs:
                    rel = src.rstrip("/")
                    if not (ROOT / rel).exists():
                        errors.append(f"{path}:{line}: COPY source {src} does not exist")
                    elif ignored(rel, patterns) or ((ROOT / rel).is_dir() and ignored(rel + "/x", patterns)):
                        errors.append(f"{path}:{line}: COPY source {src} is excluded by .dockerignore")
            if word == "RUN" and "apt-get install" in args:
                if "--no-install-recommends" not in args:
                    errors.append(f"{path}:{line}: apt-get install without --no-install-recommends")
                if "apt-get update" not in args:
                    errors.append(f"{path}:{line}: apt-get install without apt-get update in the same RUN")
                # A Debian build stage: its packages must be setup.sh's serve_packages.
                if i < len(stages) - 1 and re.search(r"^ARG DEBIAN_IMAGE=debian:", text, re.M):
                    pkgs = re.search(r"apt-get install (.*?)(?:&&|$)", args)
                    listed = [p for p in (pkgs.group(1).split() if pkgs else []) if not p.startswith("-")]
                    extra = sorted(set(listed) - known)
                    if extra or not listed:
                        errors.append(f"{path}:{line}: build packages not in scripts/setup.sh: {extra or 'none found'}")
    final = stages[-1]
    words = {w: a for _, w, a in final["ins"]}
    user = words.get("USER", "")
    if not user:
        errors.append(f"{path}: image stage {final['name']} has no USER")
    elif user.split(":")[0] in ("root", "0") or not user.split(":")[0].isdigit():
        errors.append(f"{path}: USER {user}: use a numeric non-root uid (runAsNonRoot can check it)")
    if "EXPOSE" not in words:
        errors.append(f"{path}: image stage has no EXPOSE")
    hc = words.get("HEALTHCHECK", "")
    m = re.search(r"\bCMD\s+(\[.*\])\s*$", hc)
    if not m or not is_exec_form(m.group(1)):
        errors.append(f"{path}: image stage has no HEALTHCHECK ... CMD [exec form]")
    if words.get("STOPSIGNAL") != "SIGTERM":
        errors.append(f"{path}: image stage has no STOPSIGNAL SIGTERM")
    for w in ("ENTRYPOINT", "CMD"):
        if w not in words or not is_exec_form(words[w]):
            errors.append(f"{path}: {w} missing or not in exec form (JSON array)")
    if "ENTRYPOINT" in words and is_exec_form(words["ENTRYPOINT"]):
        entry = json.loads(words["ENTRYPOINT"])
        if "/usr/local/bin/llamaserve" not in entry:
            errors.append(f"{path}: ENTRYPOINT does not run /usr/local/bin/llamaserve")
    env = " ".join(a for _, w, a in final["ins"] if w == "ENV")
    for var in ("LLAMASERVE_HOST=0.0.0.0", "LLAMASERVE_PORT="):
        if var not in env:
            errors.append(f"{path}: image stage ENV lacks {var}")
    print(f"  {path}: stages {names}; image stage: USER {user}, EXPOSE {words.get('EXPOSE')}, "
          f"ENTRYPOINT {words.get('ENTRYPOINT')}: {'ok' if not errors else 'FAILED'}")
    return errors


def configure_from_context(path: str) -> list[str]:
    """Runs the build stage's cmake configure on a copy of only what it COPYs."""
    text = (ROOT / path).read_text()
    defaults = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
    stage = text.split("\nFROM ")[1] if text.count("\nFROM ") >= 2 else text
    srcs = []
    for _, word, args in instructions("FROM " + stage):
        if word == "COPY" and "--from=" not in args:
            srcs += [w for w in shlex.split(args) if not w.startswith("--")][:-1]
    run = next((a for _, w, a in instructions("FROM " + stage)
                if w == "RUN" and "cmake --preset" in a), None)
    if run is None:
        return [f"{path}: no RUN with cmake --preset in the build stage"]
    configure = run[run.index("cmake --preset"):].split("&&")[0].strip()
    configure = re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), m.group(0)), configure)
    if "--preset cuda" in configure and not Path("/usr/local/cuda/bin/nvcc").exists():
        print(f"  {path}: configure skipped (no /usr/local/cuda/bin/nvcc here)")
        return []
    with tempfile.TemporaryDirectory() as tmp:
        for src in srcs:
            source, dest = ROOT / src.rstrip("/"), Path(tmp) / src.rstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest)
            else:
                shutil.copy2(source, dest)
        result = subprocess.run(configure, shell=True, cwd=tmp, capture_output=True, text=True,
                                timeout=300)
    if result.returncode != 0:
        return [f"{path}: `{configure}` on the COPYed files failed:\n"
                + "\n".join((result.stdout + result.stderr).splitlines()[-15:])]
    print(f"  {path}: `{configure}` configures from the {len(srcs)} COPY sources alone: ok")
    return []


def main(argv: list[str]) -> int:
    configure = "--configure" in argv
    argv = [a for a in argv if a != "--configure"]
    errors = [e for p in argv for e in check_file(p)]
    if configure and not errors:
        errors = [e for p in argv for e in configure_from_context(p)]
    for e in errors:
        print(f"  FAIL  {e}", file=sys.stderr)
    return 1 if errors or not argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
