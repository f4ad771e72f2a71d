#!/usr/bin/env bash
# Runs every fuzz target for a bounded time each, over a copy of its seed corpus:
#   scripts/run_fuzz.sh [SECONDS_PER_TARGET]   (default 60)
# A target is tests/fuzz/corpus/<name>/ with the binary <name>_fuzz in the fuzz build
# (FUZZ_BUILD_DIR, default build/fuzz; build it with --target fuzz_targets), and
# tests/fuzz/<name>.dict as its dictionary when present. Every target runs even after one
# fails; the exit status is non-zero if any target found a crash, leak, timeout or property
# violation, or is missing. Failing inputs are kept in build/fuzz-artifacts/<name>/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
build=${FUZZ_BUILD_DIR:-$root/build/fuzz}
artifacts="$root/build/fuzz-artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=()
for corpus in "$root"/tests/fuzz/corpus/*/; do
  name=$(basename "$corpus")
  binary="$build/tests/fuzz/${name}_fuzz"
  echo "--- fuzz $name: ${seconds} s"
  if [[ ! -x "$binary" ]]; then
    echo "--- fuzz $name: missing $binary (build the fuzz_targets target)"
    failed+=("$name")
    continue
  fi
  mkdir -p "$work/$name" "$artifacts/$name"
  cp -r "$corpus." "$work/$name/"
  options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
    -artifact_prefix="$artifacts/$name/")
  if [[ -f "$root/tests/fuzz/$name.dict" ]]; then
    options+=(-dict="$root/tests/fuzz/$name.dict")
  fi
  if "$binary" "${options[@]}" "$work/$name"; then
    echo "--- fuzz $name: ok"
  else
    echo "--- fuzz $name: FAILED (inputs in $artifacts/$name/)"
    failed+=("$name")
  fi
done

if ((${#failed[@]} > 0)); then
  echo "fuzz targets failed: ${failed[*]}"
  exit 1
fi
echo "all fuzz targets passed"
