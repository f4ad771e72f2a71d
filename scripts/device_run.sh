#!/usr/bin/env bash
# Runs the GPU tests and the CUDA kernel micro-benchmark on the GPU machine, from the repo
# root, with a build directory carried from the build machine (default build/cuda; override
# with BUILD_DIR). Everything goes under $OUT: one <step>.log per step (also echoed), gtest XML,
# the benchmark CSV, and summary.txt. Exit status 0 only if every step passed.
#
# Usage: OUT=/path scripts/device_run.sh [STEP...]
#   steps: env tests bench (the default, in that order), sanitize (memcheck of the kernel tests)
# The build machine needs only these paths of the build dir: tests/gpu, bench/cuda_kernels,
# runtime-libs (fmt/spdlog; the binaries link the CUDA runtime and libstdc++ statically and
# use the machine's driver and cuBLAS).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
: "${OUT:?set OUT to the directory for logs and results}"
mkdir -p "$OUT"
build=${BUILD_DIR:-build/cuda}
# Tests fail instead of skipping when they find no device, and find fixtures in this copy of
# the tree (not at the build machine's path).
export LLAMASERVE_REQUIRE_GPU=1
export LLAMASERVE_SOURCE_DIR="$root"
export LD_LIBRARY_PATH="$root/$build/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(env tests bench)

summary="$OUT/summary.txt"
: >"$summary"
failures=0

# step NAME TIMEOUT_S COMMAND...: runs COMMAND with a time limit, output to $OUT/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee "$OUT/$name.log"
  local start=$SECONDS
  timeout --signal=TERM --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  local took=$((SECONDS - start))
  local verdict=PASS
  if [[ $rc -eq 124 ]]; then
    verdict="FAIL (timed out after ${limit} s)"
  elif [[ $rc -ne 0 ]]; then
    verdict="FAIL (exit $rc)"
  fi
  [[ $verdict != PASS ]] && failures=$((failures + 1))
  printf '%-44s %-28s %5d s\n' "$name" "$verdict" "$took" | tee -a "$summary"
}

need_binary() {  # need_binary NAME PATH: records a failed step when the binary is missing
  if [[ ! -x $2 ]]; then
    printf '%-44s %-28s\n' "$1" "FAIL (missing $2)" | tee -a "$summary"
    failures=$((failures + 1))
    return 1
  fi
  local missing
  missing=$(ldd "$2" 2>/dev/null | grep "not found")
  if [[ -n $missing ]]; then
    echo "$2 has unresolved libraries:" | tee -a "$OUT/$1.log"
    echo "$missing" | tee -a "$OUT/$1.log"
  fi
  return 0
}

for s in "${steps[@]}"; do
  case $s in
    env)
      step env 60 bash -c 'nvidia-smi || true; nvidia-smi -q -d CLOCK,MEMORY 2>/dev/null | head -60 || true;
        echo; uname -a; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"'
      ;;
    tests)
      # Every GPU test binary the build produced, one process per test suite, so that a device
      # fault in one suite (which poisons the CUDA context) does not fail the others.
      found=0
      for bin in "$build"/tests/gpu/*_test; do
        [[ -e $bin ]] || continue
        found=1
        name=$(basename "$bin")
        need_binary "$name" "$bin" || continue
        suites=$("$bin" --gtest_list_tests 2>/dev/null | grep -E '^[A-Za-z][^ ]*\.( |$)' | sed 's/\..*//' | sort -u)
        if [[ -z $suites ]]; then
          printf '%-44s %-28s\n' "$name" "FAIL (cannot list tests)" | tee -a "$summary"
          failures=$((failures + 1))
          continue
        fi
        for suite in $suites; do
          tag="$name.${suite//\//_}"
          step "$tag" 300 "$bin" --gtest_color=no --gtest_filter="$suite.*" \
            --gtest_output="xml:$OUT/$tag.xml"
          { grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$OUT/$tag.log"
            grep -E '^\[ +FAILED +\] [A-Za-z]' "$OUT/$tag.log" |
              sed -E 's/,? where .*//; s/ \([0-9]+ ms\)$//' | sort -u | head -40; } |
            sed "s/^/    /" | tee -a "$summary"
        done
      done
      if [[ $found -eq 0 ]]; then
        printf '%-44s %-28s\n' tests "FAIL (no $build/tests/gpu/*_test)" | tee -a "$summary"
        failures=$((failures + 1))
      fi
      ;;
    sanitize)
      # Optional (not in the default steps): the kernel tests under compute-sanitizer's memcheck,
      # on the suites with small inputs.
      sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      bin="$build/tests/gpu/cuda_kernels_test"
      if [[ ! -x $sanitizer ]]; then
        printf '%-44s %-28s\n' sanitize "SKIP (no compute-sanitizer)" | tee -a "$summary"
      elif need_binary sanitize "$bin"; then
        step sanitize 540 "$sanitizer" --tool memcheck --error-exitcode 3 "$bin" --gtest_color=no \
          --gtest_filter='*Attention*:*RmsNorm*:*Rope*:*Elementwise*:*DequantTest*:*MatvecTest.Accumulates*:*Sampling*Greedy*'
      fi
      ;;
    bench)
      bin="$build/bench/cuda_kernels/cuda_kernels_bench"
      need_binary cuda_kernels_bench "$bin" &&
        step cuda_kernels_bench 300 "$bin" --csv "$OUT/cuda_kernels_bench.csv"
      ;;
    *)
      echo "unknown step '$s' (steps: env tests bench sanitize)" | tee -a "$summary"
      failures=$((failures + 1))
      ;;
  esac
done

echo "=== summary ($failures failed)"
cat "$summary"
echo "failed steps: $failures" >>"$summary"
[[ $failures -eq 0 ]]
