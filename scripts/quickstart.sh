#!/usr/bin/env bash
# Quick start: install what serving needs, fetch the default model, build `llamaserve` only
# (the test command builds the rest), and serve on http://127.0.0.1:8080 (a chat page at /).
# Extra arguments are passed to `llamaserve serve` (e.g. --port 9000 --host 0.0.0.0).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" --serve
exec "$root/build/cpu/src/cli/llamaserve" serve -m "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$@"
