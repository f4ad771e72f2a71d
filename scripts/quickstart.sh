#!/usr/bin/env bash
# Quick start: set up, build, and serve the default model on http://127.0.0.1:8080.
# Extra arguments are passed to `llamaserve serve` (e.g. --port 9000 --host 0.0.0.0).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
exec "$root/build/cpu/src/cli/llamaserve" serve -m "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$@"
