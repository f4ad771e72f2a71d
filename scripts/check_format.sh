#!/usr/bin/env bash
# Fails when a C++/CUDA file of the project's own code is not clang-formatted (.clang-format).
# Fix with: scripts/check_format.sh --fix
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.cc' 'src/*.h' 'src/*.cu' 'src/*.cuh' 'tests/*.cc' \
  'tests/*.h' 'tests/*.cu' 'bench/*.cc' 'bench/*.h' 'bench/*.cu' 'bench/*.cuh' 'bindings/*.cc' \
  'bindings/*.h')
if [[ "${1:-}" == --fix ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
clang-format --dry-run -Werror "${files[@]}"
echo "format: ${#files[@]} files clang-formatted"
