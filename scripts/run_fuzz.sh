#!/usr/bin/env bash
# Runs the GGUF reader fuzz target for a bounded time over a copy of the seed corpus.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/tests/fuzz/corpus/gguf/." "$work/"
"$root/build/fuzz/tests/fuzz/gguf_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 "$work"
