#!/usr/bin/env bash
# Quick start: set up, build, and start the main job on the default model.
# Extra arguments are passed to the command (e.g. --port 9000).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
exec "$root/build/cpu/src/cli/llamaserve" chat -m "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$@"
