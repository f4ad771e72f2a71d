#!/usr/bin/env bash
# Builds the CUDA binaries on this machine and stages what the GPU machine needs in one folder
# (default build/carry) that a single device call carries and runs with
#   BUILD_DIR=build/carry scripts/device_run.sh STEP...
# The binaries are stripped: the carried tree (tracked files + this folder) must stay under the
# device tool's 64 MiB.
#
# Usage: scripts/gpu_carry.sh [--build-dir build/cuda-dev] [--carry build/carry] [--pack]
#                             [TARGET...]
#   --pack: also packs the folder as <carry>-pack/carry.tar.xz (one CUDA binary shrinks about
#     five times, several together far more: they share most of their code), for calls that
#     carry more than the binaries; carry <carry>-pack instead and
#     unpack it there first:
#       python3 -c 'import tarfile; tarfile.open("build/carry-pack/carry.tar.xz").extractall("build")'

#   TARGETs: GPU test binaries (cuda_kernels_test cuda_executor_test multi_gpu_test peer_reduce_test
#   gpu_engine_test model_service_test embedded_engine_test), cuda_kernels_bench, all_reduce_bench,
#   logits_tool, kernel_timeline (timeline7b's library); llamaserve, the runtime libraries and the
#   fixtures always come along. Default: every GPU test binary.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=build/cuda-dev
carry=build/carry
targets=()
pack=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --carry) carry=$2; shift 2 ;;
    --pack) pack=1; shift ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ ${#targets[@]} -eq 0 ]] && targets=(cuda_kernels_test cuda_executor_test multi_gpu_test peer_reduce_test gpu_engine_test
  model_service_test embedded_engine_test)

if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake --preset cuda -B "$build"
fi
cmake --build "$build" -j"$(nproc)" --target llamaserve "${targets[@]}"

rm -rf "$carry"
mkdir -p "$carry/src/cli"
strip -o "$carry/src/cli/llamaserve" "$build/src/cli/llamaserve"
for t in "${targets[@]}"; do
  src=$(find "$build" -type f \( -name "$t" -o -name "lib$t.so" \) -perm -u+x | head -1)
  [[ -n $src ]] || { echo "gpu_carry: no binary $t under $build" >&2; exit 1; }
  dst="$carry/${src#"$build"/}"
  mkdir -p "$(dirname "$dst")"
  strip -o "$dst" "$src"
done
cp -r "$build/runtime-libs" "$build/fixtures" "$carry/"
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
if [[ $pack -eq 1 ]]; then
  rm -rf "$carry-pack"
  mkdir -p "$carry-pack"
  # -9e: a dictionary larger than one binary, so the test binaries' shared code is stored once
  # (five of them: 12 MiB against 37 with -6).
  tar -C "$(dirname "$carry")" -cf - "$(basename "$carry")" | xz -T0 -9e >"$carry-pack/carry.tar.xz"
  carry="$carry-pack"
fi
staged=$(du -sb "$carry" | cut -f1)
total=$((tracked + staged))
echo "gpu_carry: $carry holds $((staged / 1048576)) MiB; with the tracked tree $((total / 1048576)) MiB (limit 64)"
[[ $total -lt $((64 * 1048576)) ]] || { echo "gpu_carry: too large to carry; pass fewer targets" >&2; exit 1; }
