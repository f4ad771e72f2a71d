#!/usr/bin/env bash
# Runs every test: set-up and cpu build, unit tests (cpu), Python reference and e2e tests
# (the chat page in headless Chromium, promtool on rules and a live scrape, a loadtest
# sweep), Java tests, the deploy manifests and the CPU container image, CUDA compile check and
# the CUDA tests that need no GPU, ASan/UBSan unit tests, TSan engine tests, and a bounded fuzz
# run.
# Ends with one summary line "N passed, N failed". Exit status 0 only if nothing failed.
#
# Environment: FUZZ_SECONDS per fuzz target (default 30), SKIP_SANITIZERS=1 and SKIP_CUDA=1 to shorten a
# local run (CI runs everything).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
reports="$root/build/test-reports"
rm -rf "$reports" && mkdir -p "$reports"
jobs=$(nproc)
stage_failures=0

stage_number=0
stage() {  # stage NAME COMMAND...: runs a stage, counting a non-zero exit as one failure
  local name=$1
  shift
  stage_number=$((stage_number + 1))
  local log
  log="$reports/stage-$(printf %02d $stage_number).log"
  echo "=== $name"
  local start=$SECONDS
  if ! "$@" 2>&1 | tee "$log"; then
    echo "=== $name FAILED"
    echo "$name" >>"$reports/failed-stages.txt"
    echo "$log $name" >>"$reports/failed-logs.txt"
    stage_failures=$((stage_failures + 1))
  fi
  echo "=== $name took $((SECONDS - start)) s"
  printf '%5d s  %s\n' $((SECONDS - start)) "$name" >>"$reports/stage-times.txt"
}

ctest_preset() {  # ctest_preset PRESET [ctest args...]
  local preset=$1
  shift
  ctest --test-dir "build/$preset" -j "$jobs" --output-on-failure --timeout 600 \
    --output-junit "$reports/ctest-$preset.xml" "$@"
}

# Shell functions cannot run under `env`: the sanitizer options are set in these.
asan_tests() {
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest_preset asan
}
tsan_tests() {
  TSAN_OPTIONS=halt_on_error=1 ctest_preset tsan \
    -R '^Engine|^Scheduler|^BlockManager|^Sampler|^TransportTest|^ThreadPool|^PagedAttention'
}

stage format scripts/check_format.sh
stage setup scripts/setup.sh || true
export LLAMASERVE_BIN="$root/build/cpu/src/cli/llamaserve"
export LLAMASERVE_BUILD_DIR="$root/build/cpu"

stage "unit tests (cpu)" ctest_preset cpu
stage "python tests" python3 -m pytest -q -p no:cacheprovider --junitxml="$reports/pytest.xml" tests/py tests/e2e
stage "java tests" mvn -B -ntp -o -s bindings/java/settings.xml -f bindings/java/pom.xml test \
  -Dllamaserve.requireNative=true -Dllamaserve.bin="$LLAMASERVE_BIN" \
  -Dllamaserve.jni.path="$LLAMASERVE_BUILD_DIR/bindings/java/libllamaserve_jni.so" \
  -Dllamaserve.reportsDirectory="$reports"

stage "cpu image (podman)" scripts/check_image.sh --mode prebuilt --timeout 600

if [[ "${SKIP_CUDA:-0}" != 1 ]]; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    stage "cuda build (compile only)" bash -c "cmake --preset cuda >/dev/null && cmake --build --preset cuda -j $jobs --target cuda_check"
    # The device code's layout logic (weight formats, quant_mma's lanes, the matvec's dot
    # formats) compiled for the host: no GPU needed.
    stage "cuda host tests" build/cuda/tests/gpu/cuda_kernels_test \
      --gtest_filter='*OnHost*:NibblePairs.*:PairOrder.*:Q8Reference.*' \
      --gtest_output="xml:$reports/gtest-cuda-host.xml"
  else
    echo "=== cuda build skipped: no /usr/local/cuda/bin/nvcc"
  fi
fi

if [[ "${SKIP_SANITIZERS:-0}" != 1 ]]; then
  stage "asan build" bash -c "cmake --preset asan >/dev/null && cmake --build --preset asan -j $jobs"
  stage "unit tests (asan+ubsan)" asan_tests
  stage "tsan build (engine, transport, thread pool)" bash -c "cmake --preset tsan >/dev/null && cmake --build --preset tsan -j $jobs --target engine_test http_test core_test backend_cpu_kernels_test"
  stage "engine, transport and thread pool tests (tsan)" tsan_tests
  stage "fuzz build" bash -c "cmake --preset fuzz >/dev/null && cmake --build --preset fuzz -j $jobs --target fuzz_targets"
  stage "fuzz (${FUZZ_SECONDS:-30} s per target)" scripts/run_fuzz.sh "${FUZZ_SECONDS:-30}"
fi

# The end of every failed stage's output again, next to the summary, where a reader of only
# the last lines of the run finds it.
if [[ -f "$reports/failed-logs.txt" ]]; then
  while read -r log name; do
    echo "=== last lines of the failed stage: $name"
    tail -n 40 "$log"
  done <"$reports/failed-logs.txt"
fi
echo "=== time per stage"
cat "$reports/stage-times.txt"
python3 scripts/test_summary.py "$reports" "$stage_failures"
