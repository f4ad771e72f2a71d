#!/usr/bin/env bash
# Runs the GPU tests, the CUDA kernel micro-benchmark and the 7B-shape model benchmark on the GPU
# machine, from the repo root, with a build directory carried from the build machine (default
# build/cuda; override with BUILD_DIR). Exit status 0 only if every step passed.
#
# The whole loop: scripts/gpu_carry.sh [targets] here (builds, stages build/carry), one device
# call carrying build/carry that runs `BUILD_DIR=build/carry scripts/device_run.sh STEP...`, then
# scripts/gpu_result.py on the folder it hands back writes the bench/results file.
#
# Usage: OUT=/path scripts/device_run.sh [STEP...]
#   steps: env tests bench (the default, in that order), bench7b, grammar7b, serve7b, loadtest7b,
#   prefix7b, chunk7b, chunksweep7b, optimes7b, firstreq7b,
#   multi7b, serve, sanitize, allreduce, replicas7b, transformers7b, profile7b, timeline7b, tp70b,
#   layouts
#   layouts: cuda_executor_test and gpu_engine_test (GPU_LAYOUT_TESTS) once per multi-GPU
#     layout of GPU_TEST_LAYOUTS (default "tp2 pp2 pp2mb tp2xpp2 replicas2";
#     LLAMASERVE_TEST_LAYOUT, tests/gpu/test_layout.h)
#   bench7b: writes LLaMA-2-7B-shaped models with random weights (llamaserve synth) to
#     BENCH7B_DIR (default /tmp; reused when present) for each of BENCH7B_TYPES (default
#     "q4_k_m q8_0 f16") and runs `llamaserve bench` on cuda:0 with BENCH7B_ARGS (default
#     -p 512 -n 128 -b 1,16,64,256 --reps 3). One device call runs at most 10 minutes: give
#     one type per call (a warm machine keeps BENCH7B_DIR between calls), e.g.
#     BENCH7B_TYPES=q4_k_m scripts/device_run.sh bench7b; BENCH7B_ARGS with --no-pdl compares
#     against plain launches.
#
# The device hands back at most 8 files, so $OUT ends up holding only:
#   summary.txt      one line per step (and the failed tests)
#   kernels.md       the matvec / GEMM micro-benchmark table
#   bench-7b.json    {"<type>": <llamaserve bench --json output>, ...} (in logs.tar.gz, under
#                    logs/results/, as every file but the summary and the markdown tables)
#   bench-7b.md      the same as markdown tables
#   loadtest-7b/     report.md of loadtest7b and step-durations.md (the engine's steps by kind
#                    and duration over the load: bench/serve/step_durations.py; report.json,
#                    metrics.txt and metrics-before.txt in logs.tar.gz)
#   profile-7b.md    per-kernel time of profiled decode steps or prompt passes (profile7b;
#                    PROFILE_BATCHES, default "1 16 256", may name "prompt")
#   timeline-7b.md   what each kernel added to decode steps as they ran (timeline7b)
#   logs.tar.gz      every step's log, gtest XML, and under logs/results/ every other file the
#                    steps wrote (JSON results, the kernel benchmark CSV, /metrics scrapes)
# The build dir needs: tests/gpu, bench/cuda_kernels, src/cli/llamaserve, runtime-libs (shared
# libraries the binaries need beyond the driver and cuBLAS) and fixtures (the LLaMA 2 vocabulary
# that synth copies).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
: "${OUT:?set OUT to the directory for logs and results}"
mkdir -p "$OUT"
logs="$OUT/logs"
mkdir -p "$logs"
build=${BUILD_DIR:-build/cuda}
# Tests fail instead of skipping when they find no device, and find fixtures in this copy of
# the tree (not at the build machine's path).
export LLAMASERVE_REQUIRE_GPU=1
export LLAMASERVE_SOURCE_DIR="$root"
export LLAMASERVE_FIXTURES_DIR="$root/${BUILD_DIR:-build/cuda}/fixtures"
export LD_LIBRARY_PATH="$root/$build/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(env tests bench)

summary="$OUT/summary.txt"
: >"$summary"
failures=0

# step NAME TIMEOUT_S COMMAND...: runs COMMAND with a time limit, output to $logs/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" | tee "$logs/$name.log"
  local start=$SECONDS
  timeout --signal=TERM --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$logs/$name.log"
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
  return "$rc"
}

note() {  # note NAME VERDICT: a summary line for a step that did not run
  printf '%-44s %-28s\n' "$1" "$2" | tee -a "$summary"
}

need_binary() {  # need_binary NAME PATH: records a failed step when the binary is missing
  if [[ ! -x $2 ]]; then
    note "$1" "FAIL (missing $2)"
    failures=$((failures + 1))
    return 1
  fi
  local missing
  missing=$(ldd "$2" 2>/dev/null | grep "not found")
  if [[ -n $missing ]]; then
    echo "$2 has unresolved libraries:" | tee -a "$logs/$1.log"
    echo "$missing" | tee -a "$logs/$1.log"
  fi
  return 0
}

# synth7b TYPE: the LLaMA-2-7B shape in TYPE at $BENCH7B_DIR/llama2-7b-TYPE.gguf (default /tmp),
# written once and reused by later steps on a warm machine; sets synth7b_model to its path.
# Fails (a failed step) when the file could not be written.
synth7b() {
  local type=$1 bin="$build/src/cli/llamaserve"
  synth7b_model="${BENCH7B_DIR:-/tmp}/llama2-7b-$type.gguf"
  local vocab=()
  [[ -f $build/fixtures/vocab-llama2-spm.gguf ]] && vocab=(--vocab "$build/fixtures/vocab-llama2-spm.gguf")
  [[ -s $synth7b_model ]] && return 0
  step "synth-7b-$type" 420 "$bin" synth --shape llama2-7b --type "$type" -o "$synth7b_model" \
    --progress lines "${vocab[@]}"
}

bench7b() {
  local bin="$build/src/cli/llamaserve"
  need_binary llamaserve "$bin" || return
  if ! "$bin" synth --help >/dev/null 2>&1; then
    note bench7b "SKIP (this llamaserve has no synth command)"
    return
  fi
  local args
  read -r -a args <<<"${BENCH7B_ARGS:--p 512 -n 128 -b 1,16,64,256 --reps 3}"
  local json="$OUT/bench-7b.json" md="$OUT/bench-7b.md" first=1
  echo "{" >"$json"
  : >"$md"
  for type in ${BENCH7B_TYPES:-q4_k_m q8_0 f16}; do
    synth7b "$type" || continue
    local model=$synth7b_model
    step "bench-7b-$type" 420 "$bin" bench -m "$model" --device "${BENCH7B_DEVICE:-cuda:0}" "${args[@]}" \
      --json-file "$logs/bench-7b-$type.json" --markdown-file "$logs/bench-7b-$type.md" || continue
    [[ $first -eq 1 ]] || echo "," >>"$json"
    first=0
    printf '"%s": ' "$type" >>"$json"
    cat "$logs/bench-7b-$type.json" >>"$json"
    { echo "## LLaMA-2-7B shape, $type"; echo; cat "$logs/bench-7b-$type.md"; echo; } >>"$md"
  done
  echo "}" >>"$json"
}

# Structured output on the 7B shape: decode with and without a JSON Schema through the whole
# engine (bench/grammar/structured_decode_bench) at batch 1 and 64, for each of GRAMMAR7B_TYPES
# (default "f16 q4_k_m"), synthesized as in bench7b: $OUT/grammar-7b.md.
grammar7b() {
  local bin="$build/bench/grammar/structured_decode_bench"
  need_binary structured_decode_bench "$bin" || return
  local md="$OUT/grammar-7b.md" args
  read -r -a args <<<"${GRAMMAR7B_ARGS:--b 1,64 -n 128 --reps 3}"
  : >"$md"
  for type in ${GRAMMAR7B_TYPES:-f16 q4_k_m}; do
    synth7b "$type" || continue
    step "grammar-7b-$type" 400 "$bin" -m "$synth7b_model" --device cuda:0 "${args[@]}" ||
      continue
    { echo "## LLaMA-2-7B shape, $type"; echo; cat "$logs/grammar-7b-$type.log"; echo; } >>"$md"
  done
}

# The HTTP server end to end on the 7B shape: SERVE7B_TYPE (default f16) synthesized as in
# bench7b, served on cuda:0, and bench/serve/serve_load.py's streaming clients at
# SERVE7B_STREAMS (default 1,16,64,256) plus pooled vs fresh connections at 1 stream:
# $OUT/$SERVE7B_NAME.md and .json (default serve-7b). SERVE7B_BIN serves another llamaserve
# binary (an older build, for a before/after comparison on the same machine).
serve7b() {
  local bin=${SERVE7B_BIN:-$build/src/cli/llamaserve} name=${SERVE7B_NAME:-serve-7b}
  need_binary serve7b "$bin" || return
  local type=${SERVE7B_TYPE:-f16}
  synth7b "$type" || return
  local model=$synth7b_model
  step "$name-$type" 500 python3 bench/serve/serve_load.py \
    --serve "$bin serve -m $model --device cuda:0 --ctx-size 512 --max-running 256 --max-queue 256 --max-tokens-limit 256" \
    --server-log "$logs/$name-server.log" --streams "${SERVE7B_STREAMS:-1,16,64,256}" \
    --compare-fresh --min-requests 32 --requests-per-stream 3 \
    --json "$OUT/$name.json" --markdown "$OUT/$name.md"
}

# `llamaserve loadtest` on the 7B shape: LOADTEST7B_TYPE (default f16) synthesized as in
# bench7b and served on cuda:0 with LOADTEST7B_SERVE_ARGS (default --ctx-size 512
# --max-running 256 --max-queue 256 --max-tokens-limit 256), then a closed-loop sweep over
# LOADTEST7B_CONCURRENCY (default 1,16,64,256) streams with LOADTEST7B_ARGS (default 128-token
# prompts and 128-token outputs), each step sending for LOADTEST7B_DURATION seconds (default 30)
# before its requests in flight finish: $OUT/$LOADTEST7B_NAME/ (default loadtest-7b) holds
# report.json, report.md, metrics.txt (the server's /metrics after the sweep) and, where
# gnuplot is installed, report.svg and report.png (report.gp and the server's log go to the
# logs). LOADTEST7B_BESIDE, when set, is a second loadtest command line (its flags after
# `loadtest --url URL`) started LOADTEST7B_BESIDE_DELAY seconds (default 10) into the sweep,
# whose report goes to $OUT/$LOADTEST7B_NAME/beside/.
loadtest7b() {
  local bin="$build/src/cli/llamaserve"
  need_binary loadtest7b "$bin" || return
  if ! "$bin" loadtest --help >/dev/null 2>&1; then
    note loadtest7b "SKIP (this llamaserve has no loadtest command)"
    return
  fi
  local type=${LOADTEST7B_TYPE:-f16} name=${LOADTEST7B_NAME:-loadtest-7b}
  synth7b "$type" || return
  local model=$synth7b_model out="$OUT/$name"
  mkdir -p "$out"
  step "$name-$type" 560 bash -c '
    bin=$1 model=$2 out=$3 logs=$4 concurrency=$5 duration=$6 name=$7 serve_args=$8 load_args=$9
    beside=${10} beside_delay=${11}
    server_log="$logs/$name-server.log"
    # shellcheck disable=SC2086
    "$bin" serve -m "$model" --device cuda:0 --port 0 $serve_args >"$server_log" 2>&1 &
    server=$!
    trap "kill $server 2>/dev/null; wait $server 2>/dev/null" EXIT
    url=""
    for _ in $(seq 600); do  # up to 5 minutes for the model to load
      if ! kill -0 "$server" 2>/dev/null; then
        echo "the server exited:"; cat "$server_log"; exit 1
      fi
      port=$(grep -oE "listening on http://[^ ]+:[0-9]+" "$server_log" | grep -oE "[0-9]+$" | head -1)
      if [[ -n $port ]] && python3 -c "import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$port/ready" 2>/dev/null; then
        url="http://127.0.0.1:$port"
        break
      fi
      sleep 0.5
    done
    [[ -n $url ]] || { echo "the server was not ready in time"; tail -20 "$server_log"; exit 1; }
    scrape() { python3 -c "import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" "$url/metrics"; }
    scrape >"$out/metrics-before.txt" 2>&1
    beside_pid=""
    if [[ -n $beside ]]; then
      mkdir -p "$out/beside"
      # shellcheck disable=SC2086
      (sleep "$beside_delay"; "$bin" loadtest --url "$url" $beside --progress none \
        --out "$out/beside" >"$logs/$name-beside.log" 2>&1) &
      beside_pid=$!
    fi
    # shellcheck disable=SC2086
    "$bin" loadtest --url "$url" -c "$concurrency" $load_args \
      --duration "$duration" --warmup-requests 8 --request-timeout-s 120 --progress lines \
      --out "$out"
    rc=$?
    [[ -n $beside_pid ]] && { wait "$beside_pid" || rc=1; rm -f "$out/beside/report.gp"; }
    scrape >"$out/metrics.txt" 2>&1
    # The engine steps of the load by kind and duration (and of the long prompts beside it;
    # a server from before the histogram has none: only a note).
    python3 bench/serve/step_durations.py "$out/metrics-before.txt" "$out/metrics.txt" \
      --markdown "$out/step-durations.md" || echo "no step durations from this server"
    mv "$out/report.gp" "$logs/$name.gp" 2>/dev/null
    exit "$rc"' loadtest7b "$bin" "$model" "$out" "$logs" "${LOADTEST7B_CONCURRENCY:-1,16,64,256}"     "${LOADTEST7B_DURATION:-30}" "$name"     "${LOADTEST7B_SERVE_ARGS:---ctx-size 512 --max-running 256 --max-queue 256 --max-tokens-limit 256}"     "${LOADTEST7B_ARGS:---prompt-tokens 128 --output-tokens 128}" "${LOADTEST7B_BESIDE:-}"     "${LOADTEST7B_BESIDE_DELAY:-10}"
}

# Prefix caching on the 7B shape (PREFIX7B_TYPE, default f16): the server with the cache and
# with --no-prefix-cache, each under `llamaserve loadtest` at 1 and 64 streams of 2048-token
# prompts whose first 2000 tokens are the same "system prompt", 32-token outputs, for
# PREFIX7B_DURATION seconds (default 20) per step: $OUT/prefix-7b-on/ and prefix-7b-off/.
# PREFIX7B_MODES (default "on off") picks the servers, PREFIX7B_CONCURRENCY (default 1,64) the
# steps, PREFIX7B_SERVE_EXTRA adds serve flags (--op-times: the server logs per-operation times).
prefix7b() {
  local mode
  for mode in ${PREFIX7B_MODES:-on off}; do
    local flag=""
    [[ $mode == off ]] && flag="--no-prefix-cache"
    LOADTEST7B_TYPE=${PREFIX7B_TYPE:-f16} LOADTEST7B_NAME="prefix-7b-$mode" \
      LOADTEST7B_CONCURRENCY=${PREFIX7B_CONCURRENCY:-1,64} \
      LOADTEST7B_DURATION=${PREFIX7B_DURATION:-20} \
      LOADTEST7B_SERVE_ARGS="--ctx-size 4096 --max-running 64 --max-queue 256 --kv-cache-tokens 160000 --max-tokens-limit 256 $flag ${PREFIX7B_SERVE_EXTRA:-}" \
      LOADTEST7B_ARGS="--prompt-tokens 2048 --shared-prefix-tokens 2000 --output-tokens 32" \
      loadtest7b
  done
}

# Prompt chunks beside decodes on the 7B shape (CHUNK7B_TYPE, default f16): 64 and 256
# streams of 128+128 tokens for CHUNK7B_DURATION seconds (default 30) each while, 10 s into
# the sweep, three 8192-token prompts arrive one after another (LOADTEST7B_BESIDE), once with
# the engine's default bound on prompt rows beside decodes and once with
# --prefill-chunk-tokens 0 (only the 512-row step budget): $OUT/chunk-7b-default/ and
# chunk-7b-unbounded/.
chunk7b() {
  local mode
  for mode in default unbounded; do
    local flag=""
    [[ $mode == unbounded ]] && flag="--prefill-chunk-tokens 0"
    LOADTEST7B_TYPE=${CHUNK7B_TYPE:-f16} LOADTEST7B_NAME="chunk-7b-$mode" \
      LOADTEST7B_CONCURRENCY=64,256 LOADTEST7B_DURATION=${CHUNK7B_DURATION:-30} \
      LOADTEST7B_SERVE_ARGS="--ctx-size 8448 --max-running 256 --max-queue 256 --kv-cache-tokens 100000 --max-tokens-limit 256 $flag" \
      LOADTEST7B_BESIDE="-c 1 --requests 3 --prompt-tokens 8192 --output-tokens 16 --warmup-requests 0" \
      loadtest7b
  done
}

# The bound on prompt rows beside decodes swept on the 7B shape (f16): for each N of
# CHUNK_SWEEP (default "128 256 0"), 64 greedy streams of 128+128 tokens for 20 s with three
# 8192-token prompts arriving 5 s in, served with --prefill-chunk-tokens N and
# CHUNK_SWEEP_SERVE_ARGS (default none; e.g. "--kv-cache-type q8_0"): $OUT/chunk-N/report.md
# (the long prompts' report goes to the logs, under results/).
chunksweep7b() {
  local n
  for n in ${CHUNK_SWEEP:-128 256 0}; do
    LOADTEST7B_TYPE=f16 LOADTEST7B_NAME="chunk-$n" LOADTEST7B_CONCURRENCY=64 \
      LOADTEST7B_DURATION=20 LOADTEST7B_BESIDE_DELAY=5 \
      LOADTEST7B_SERVE_ARGS="--ctx-size 8448 --max-running 256 --max-queue 256 --kv-cache-tokens 100000 --max-tokens-limit 256 --prefill-chunk-tokens $n ${CHUNK_SWEEP_SERVE_ARGS:-}" \
      LOADTEST7B_ARGS="--prompt-tokens 128 --output-tokens 128 --temperature 0" \
      LOADTEST7B_BESIDE="-c 1 --requests 3 --prompt-tokens 8192 --output-tokens 16 --warmup-requests 0 --temperature 0" \
      loadtest7b
    mkdir -p "$logs/results/chunk-$n"
    mv "$OUT/chunk-$n/beside/report.md" "$logs/results/chunk-$n/beside-report.md" 2>/dev/null
  done
}

# Per-operation times of the server's passes on the 7B shape (f16): --op-times (CUDA graphs off)
# under 64 and 256 greedy streams of 128+128 tokens, 15 s each; the server logs the mean time of
# each operation per pass size when it stops (logs/optimes-server.log): $OUT/optimes/report.md.
optimes7b() {
  LOADTEST7B_TYPE=f16 LOADTEST7B_NAME=optimes LOADTEST7B_CONCURRENCY=64,256 \
    LOADTEST7B_DURATION=15 \
    LOADTEST7B_SERVE_ARGS="--ctx-size 512 --max-running 256 --max-queue 256 --max-tokens-limit 256 --op-times" \
    LOADTEST7B_ARGS="--prompt-tokens 128 --output-tokens 128 --temperature 0" \
    loadtest7b
}

# The first requests after /ready on the 7B shape (FIRSTREQ7B_TYPE, default f16): for each
# of FIRSTREQ7B_RUNS (default 2) fresh servers, the time to the first token of the first and
# the next 9 streamed 128-token prompts, one at a time (bench/serve/first_request.py):
# $OUT/first-request-7b.md and .json.
firstreq7b() {
  local bin="$build/src/cli/llamaserve"
  need_binary firstreq7b "$bin" || return
  local type=${FIRSTREQ7B_TYPE:-f16}
  synth7b "$type" || return
  step "first-request-7b-$type" 400 python3 bench/serve/first_request.py     --serve "$bin serve -m $synth7b_model --device cuda:0 --ctx-size 512 --max-running 256 --max-queue 256"     --runs "${FIRSTREQ7B_RUNS:-2}" --server-log "$logs/first-request-7b-server.log"     --json "$OUT/first-request-7b.json" --markdown "$OUT/first-request-7b.md"
}

# Model lifecycle under load on the 7B shape (RELOAD7B_TYPE, default q4_k_m): unload, load and
# RELOAD7B_CYCLES (default 10) reloads while streaming clients run, with device memory read
# after each step (scripts/gpu_model_reload.py): $OUT/reload-7b.md and .json. RELOAD7B_SERVE_ARGS
# adds serve flags (a --gpu-memory-utilization too small for two versions tests the reload
# that drains the old version first). RELOAD7B_EVICT=1 runs scripts/gpu_model_evict.py instead:
# two models with room for one, each request evicting the other ($OUT/evict-7b.md).
reload7b() {
  local bin="$build/src/cli/llamaserve"
  need_binary reload7b "$bin" || return
  local type=${RELOAD7B_TYPE:-q4_k_m}
  synth7b "$type" || return
  local model=$synth7b_model
  if [[ -n ${RELOAD7B_EVICT:-} ]]; then
    # Two models with room for one: each request for the unloaded one evicts the other.
    step "evict-7b-$type" 300 python3 scripts/gpu_model_evict.py "$bin" "$model" \
      --log "$logs/evict-7b-server.log" --markdown "$OUT/evict-7b.md"
    return
  fi
  step "reload-7b-$type" 560 python3 scripts/gpu_model_reload.py "$bin" "$model" \
    --cycles "${RELOAD7B_CYCLES:-10}" --serve-args "${RELOAD7B_SERVE_ARGS:-}" \
    --log "$logs/reload-7b-server.log" \
    --json "$OUT/reload-7b.json" --markdown "$OUT/reload-7b.md"
}

# Nsight Compute breakdown of decode steps of the 7B shape: for each of PROFILE_TYPES (default
# f16) and PROFILE_BATCHES (default "1 16 256"), with PROFILE_ARGS (default "-p 16 -n 8"; the
# context of the profiled steps is about -p + -n), 4 steps after the case's timed runs are
# profiled (kernel time and DRAM bytes per kernel) and tabulated by scripts/ncu_breakdown.py
# into $OUT/profile-7b.md, beside the step time bench7b measured without the profiler (its
# JSON from the same call, when there). PROFILE_BENCH_ARGS (default none; e.g. "--kv-cache-type
# q8_0") go to every bench run of the step.
profile7b() {
  local bin="$build/src/cli/llamaserve"
  need_binary llamaserve "$bin" || return
  local ncu
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [[ -z $ncu ]]; then
    note profile7b "SKIP (no ncu)"
    return
  fi
  local dir=${BENCH7B_DIR:-/tmp} md="$OUT/profile-7b.md" bench_args
  read -r -a bench_args <<<"${PROFILE_BENCH_ARGS:-}"
  : >"$md"
  for type in ${PROFILE_TYPES:-f16}; do
    local model="$dir/llama2-7b-$type.gguf"
    if [[ ! -s $model ]]; then
      step "synth-7b-$type" 420 "$bin" synth --shape llama2-7b --type "$type" -o "$model" \
        --progress lines --vocab "$build/fixtures/vocab-llama2-spm.gguf" || continue
    fi
    for b in ${PROFILE_BATCHES:-1 16 256}; do
      local csv="$logs/ncu-7b-$type-b$b.csv"
      # The case's bench arguments, and the options that profile it. "prompt": one prompt pass
      # of PROFILE_PROMPT tokens (default 512) instead of decode steps.
      local case_args profile_args steps=4
      read -r -a case_args <<<"${PROFILE_ARGS:--p 16 -n 8}"
      case_args+=(-b "$b")
      profile_args=(--profile-steps 4 --profile-batch "$b")
      if [[ $b == prompt ]]; then
        case_args=(-p "${PROFILE_PROMPT:-512}" -n 8 -b 1)
        profile_args=(--profile-prompt)
        steps=1
      fi
      case_args+=("${bench_args[@]}")
      step "profile-7b-$type-b$b" 400 "$ncu" --csv --print-units base --clock-control none \
        --profile-from-start off --log-file "$csv" \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        "$bin" bench -m "$model" --device cuda:0 "${case_args[@]}" "${profile_args[@]}" --reps 1 \
        --json-file "$logs/profile-bench-$type-b$b.json" ||
        continue
      # The step's (or pass's) time from a run outside the profiler: under ncu every kernel is
      # replayed, so the profiled run's own times say nothing.
      local ref="$logs/bench-7b-$type.json"
      if [[ ! -s $ref || $b == prompt || ${#bench_args[@]} -gt 0 ]]; then
        ref="$logs/profile-bench-$type-b$b-plain.json"
        "$bin" bench -m "$model" --device cuda:0 "${case_args[@]}" --reps 3 --json-file "$ref" \
          >>"$logs/profile-7b-$type-b$b.log" 2>&1 || ref=""
      fi
      [[ -s $ref ]] || ref="$logs/profile-bench-$type-b$b.json"
      local copy_gbps step_ms
      read -r copy_gbps step_ms < <(python3 - "$ref" "$b" <<'PY'
import json, sys
report = json.load(open(sys.argv[1])); b = sys.argv[2]
if b == "prompt":  # the pass: the prompt case's seconds
    case = next(c for c in report["cases"] if c["name"].startswith("prompt"))
    print(report["copy_bandwidth_gbps"], 1000 * case["seconds"])
else:
    name = f"batch {b} x"
    case = next(c for c in report["cases"] if c["name"].startswith(name))
    print(report["copy_bandwidth_gbps"], case["ms_per_token"])
PY
      )
      local title="7B $type, decode step of $b sequence(s)"
      [[ $b == prompt ]] && title="7B $type, one prompt pass of ${PROFILE_PROMPT:-512} tokens"
      [[ ${#bench_args[@]} -gt 0 ]] && title+=" (${bench_args[*]})"
      python3 scripts/ncu_breakdown.py "$csv" --steps "$steps" --copy-gbps "${copy_gbps:-0}" \
        --step-ms "${step_ms:-0}" --title "$title" >>"$md"
      echo >>"$md"
    done
  done
}

# Kernel timelines of decode steps of the 7B shape as they ran (bench/timeline: a CUPTI
# injection library, so programmatic dependent launch and graphs keep their overlap): for each
# of TIMELINE_TYPES (default "f16 q4_k_m") and TIMELINE_BATCHES (default "1"), 8 steps after
# the case's timed runs (TIMELINE_ARGS, default "-p 16 -n 64"), tabulated by
# scripts/kernel_timeline.py into $OUT/timeline-7b.md (what each kernel added to the step, and
# the time no kernel ran), beside the time of the same run's timed steps (traced too: the
# tracer adds time between steps and a little within them; a plain bench is the reference).
# TIMELINE_BASE: another build's llamaserve (e.g. build/carry-base/src/cli/llamaserve), traced
# the same way just before each case, and a table of each kernel's exposed time in both
# (kernel_timeline.py --against) follows the case's.
timeline7b() {
  local bin="$build/src/cli/llamaserve" lib="$build/bench/timeline/libkernel_timeline.so"
  need_binary llamaserve "$bin" || return
  if [[ ! -s $lib ]]; then
    note timeline7b "SKIP (no $lib: CUPTI headers missing at build time)"
    return
  fi
  # The GPU machine's CUPTI: its PyPI package (nvidia-cuda-cupti) or the toolkit's extras.
  local cupti
  cupti=$(python3 -c "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13', 'lib'))" 2>/dev/null)
  [[ -e $cupti/libcupti.so.13 ]] || cupti=$(dirname "$(ls /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* 2>/dev/null | head -1)")
  local md="$OUT/timeline-7b.md" traced=8 case_args model b
  read -r -a case_args <<<"${TIMELINE_ARGS:--p 16 -n 64}"
  # trace NAME BINARY CSV JSON: one traced bench run of the case ($model, $b sequences).
  trace() {
    step "$1" 300 env CUDA_INJECTION64_PATH="$root/$lib" KERNEL_TIMELINE_CSV="$3" \
      LD_LIBRARY_PATH="$cupti:$LD_LIBRARY_PATH" "$2" bench -m "$model" --device cuda:0 \
      "${case_args[@]}" -b "$b" --reps 3 --profile-steps "$traced" --profile-batch "$b" \
      --json-file "$4"
  }
  : >"$md"
  for type in ${TIMELINE_TYPES:-f16 q4_k_m}; do
    synth7b "$type" || continue
    model=$synth7b_model
    for b in ${TIMELINE_BATCHES:-1}; do
      local csv="$logs/timeline-7b-$type-b$b.csv" json="$logs/timeline-bench-$type-b$b.json"
      local base_csv="$logs/timeline-7b-base-$type-b$b.csv"
      if [[ -n ${TIMELINE_BASE:-} ]]; then
        trace "timeline-7b-base-$type-b$b" "$TIMELINE_BASE" "$base_csv" \
          "$logs/timeline-bench-base-$type-b$b.json" || base_csv=""
      fi
      trace "timeline-7b-$type-b$b" "$bin" "$csv" "$json" || continue
      local name="batch $b x"
      python3 scripts/kernel_timeline.py "$csv" --steps "$traced" --bench-json "$json" \
        --case "$name" --title "7B $type, decode steps of $b sequence(s)" >>"$md"
      if [[ -n ${TIMELINE_BASE:-} && -s $base_csv ]]; then
        python3 scripts/kernel_timeline.py "$csv" --steps "$traced" --against "$base_csv" \
          --title "7B $type, $b sequence(s): $TIMELINE_BASE against this build" >>"$md"
      fi
    done
  done
}

# The 7B F16 shape on one GPU, tensor parallel over two and a two-stage pipeline, with the
# same bench arguments (MULTI_ARGS); tables to $OUT/bench-multi.md, JSON to bench-multi.json.
multi7b() {
  local bin="$build/src/cli/llamaserve"
  need_binary llamaserve "$bin" || return
  local model="${BENCH7B_DIR:-/tmp}/llama2-7b-f16.gguf"
  if [[ ! -s $model ]]; then
    step synth-7b-f16 420 "$bin" synth --shape llama2-7b --type f16 -o "$model" --progress lines \
      --vocab "$build/fixtures/vocab-llama2-spm.gguf" || return
  fi
  local args
  read -r -a args <<<"${MULTI_ARGS:--p 512 -n 64 -b 1,64,256 --reps 2}"
  local json="$OUT/bench-multi.json" md="$OUT/bench-multi.md" first=1
  echo "{" >"$json"
  : >"$md"
  # NAME/DEVICES/TP/PP[/MICRO_BATCHES] (default: one per stage). tp2-peer: the small
  # all-reduces through the one-kernel peer-to-peer all-reduce, tp2-nccl: every one through
  # NCCL (default: fused into the decode matvecs); a name with -floatsums: the GEMM partials
  # summed as fp32 (default: halves); pp2-inturn: the stages one after the other (no
  # micro-batches in flight).
  local layouts
  read -r -a layouts <<<"${MULTI_LAYOUTS:-one/0/1/1 tp2/0,1/2/1 tp2-nccl/0,1/2/1 pp2/0,1/1/2 pp2-inturn/0,1/1/2/1}"
  for layout in "${layouts[@]}"; do
    IFS=/ read -r name devices tp pp mb <<<"$layout"
    local mode=fused
    [[ $name == *-peer* ]] && mode=peer
    [[ $name == *-nccl* ]] && mode=nccl
    local sums=half
    [[ $name == *-floatsums* ]] && sums=float
    step "bench-7b-f16-$name" "${MULTI_TIMEOUT:-400}" "$bin" bench -m "$model" \
      --devices "$devices" --tp "$tp" --pp "$pp" --tp-sums "$mode" --tp-gemm-sums "$sums" \
      --micro-batches "${mb:-0}" "${args[@]}" --json-file "$logs/bench-multi-$name.json" \
      --markdown-file "$logs/bench-multi-$name.md" || continue
    [[ $first -eq 1 ]] || echo "," >>"$json"
    first=0
    printf '"%s": ' "$name" >>"$json"
    cat "$logs/bench-multi-$name.json" >>"$json"
    { echo "## LLaMA-2-7B shape, F16, $name (--devices $devices --tp $tp --pp $pp --micro-batches ${mb:-0})"; echo
      cat "$logs/bench-multi-$name.md"; echo; } >>"$md"
  done
  echo "}" >>"$json"
}

for s in "${steps[@]}"; do
  case $s in
    env)
      step env 60 bash -c 'nvidia-smi || true; nvidia-smi topo -m 2>/dev/null || true;
        nvidia-smi nvlink -s 2>/dev/null | head -40 || true;
        nvidia-smi -q -d CLOCK,MEMORY 2>/dev/null | head -60 || true;
        echo; uname -a; lscpu 2>/dev/null | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-2000; df -h /tmp;
        echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"'
      ;;
    tests)
      # Every GPU test binary the build produced, one process per test suite, so that a device
      # fault in one suite (which poisons the CUDA context) does not fail the others.
      found=0
      for bin in "$build"/tests/gpu/*_test; do
        [[ -e $bin ]] || continue
        # GPU_TESTS="a_test b_test" runs only those binaries.
        [[ -n ${GPU_TESTS:-} && " $GPU_TESTS " != *" $(basename "$bin") "* ]] && continue
        found=1
        name=$(basename "$bin")
        need_binary "$name" "$bin" || continue
        suites=$("$bin" --gtest_list_tests 2>/dev/null | grep -E '^[A-Za-z][^ ]*\.( |$)' | sed 's/\..*//' | sort -u)
        if [[ -z $suites ]]; then
          note "$name" "FAIL (cannot list tests)"
          failures=$((failures + 1))
          continue
        fi
        for suite in $suites; do
          tag="$name.${suite//\//_}"
          step "$tag" "${GPU_TEST_TIMEOUT:-300}" "$bin" --gtest_color=no --gtest_filter="$suite.*" \
            --gtest_output="xml:$logs/$tag.xml"
          { grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$logs/$tag.log"
            grep -E '^\[ +FAILED +\] [A-Za-z]' "$logs/$tag.log" |
              sed -E 's/,? where .*//; s/ \([0-9]+ ms\)$//' | sort -u | head -40; } |
            sed "s/^/    /" | tee -a "$summary"
        done
      done
      if [[ $found -eq 0 ]]; then
        note tests "FAIL (no $build/tests/gpu/*_test)"
        failures=$((failures + 1))
      fi
      ;;
    layouts)
      # The executor and engine tests again in each multi-GPU layout (tests/gpu/test_layout.h):
      # GPU_TEST_LAYOUTS (default "tp2 pp2 pp2mb tp2xpp2 replicas2"), binaries GPU_LAYOUT_TESTS.
      for layout in ${GPU_TEST_LAYOUTS:-tp2 pp2 pp2mb tp2xpp2 replicas2}; do
        for name in ${GPU_LAYOUT_TESTS:-cuda_executor_test gpu_engine_test}; do
          bin="$build/tests/gpu/$name"
          need_binary "$name" "$bin" || continue
          tag="$name.layout-$layout"
          step "$tag" "${GPU_TEST_TIMEOUT:-300}" env LLAMASERVE_TEST_LAYOUT="$layout" "$bin" \
            --gtest_color=no --gtest_output="xml:$logs/$tag.xml"
          { grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$logs/$tag.log"
            grep -E '^\[ +(FAILED|SKIPPED) +\] [A-Za-z]' "$logs/$tag.log" |
              sed -E 's/,? where .*//; s/ \([0-9]+ ms\)$//' | sort -u | head -40; } |
            sed "s/^/    /" | tee -a "$summary"
        done
      done
      ;;
    sanitize)
      # Optional (not in the default steps): compute-sanitizer memcheck on the kernel tests with
      # small inputs, the executor tests and the pipeline tests (the NCCL and peer all-reduce
      # tests are left out: the sanitizer serializes kernels, and ranks that wait for each
      # other across devices would wait forever); racecheck on the kernels with shared memory.
      sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      if [[ ! -x $sanitizer ]]; then
        note sanitize "SKIP (no compute-sanitizer)"
      else
        sanitize_one() {  # sanitize_one NAME TOOL BINARY FILTER
          local bin="$build/tests/gpu/$3"
          need_binary "$1" "$bin" || return 0
          step "$1" "${SANITIZE_TIMEOUT:-240}" "$sanitizer" --tool "$2" --error-exitcode 3 "$bin" \
            --gtest_color=no --gtest_filter="$4"
        }
        sanitize_one memcheck-kernels memcheck cuda_kernels_test \
          '*Attention*:*RmsNorm*:*Rope*:*Elementwise*:*DequantTest*:*MatvecTest.Accumulates*:*MatvecTest.Parts*:*Sampling*Greedy*'
        sanitize_one memcheck-executor memcheck cuda_executor_test '*'
        sanitize_one memcheck-pipeline memcheck multi_gpu_test \
          '*Pipeline*:*Invalid*:-*TensorTimesPipeline*:*SmolLM2*'
        sanitize_one racecheck-kernels racecheck cuda_kernels_test '*Attention*:*RmsNorm*:*Greedy*'
      fi
      ;;
    transformers7b)
      # A LLaMA-2-7B-shaped model built by transformers on the GPU, converted by llamaserve,
      # logits compared on the same GPU (scripts/gpu_transformers_7b.py).
      bin="$build/src/cli/llamaserve"
      tool="$build/tests/unit/tools/logits_tool"
      if need_binary transformers7b "$bin" && need_binary transformers7b "$tool"; then
        step transformers7b 420 python3 scripts/gpu_transformers_7b.py --llamaserve "$bin" \
          --logits-tool "$tool" --tokenizer-model "$build/fixtures/llama2-tokenizer.model" \
          --work "${BENCH7B_DIR:-/tmp}" --out "$OUT/transformers-7b.json"
      fi
      ;;
    allreduce)
      bin="$build/bench/cuda_kernels/all_reduce_bench"
      need_binary all_reduce_bench "$bin" &&
        step all_reduce_bench 120 "$bin" --markdown "$OUT/all-reduce.md"
      ;;
    replicas7b)
      # Two replicas = two independent engines on two GPUs: the aggregate of two concurrent
      # single-GPU runs of the 7B F16 shape.
      bin="$build/src/cli/llamaserve"
      model="${BENCH7B_DIR:-/tmp}/llama2-7b-f16.gguf"
      if need_binary replicas7b "$bin" && [[ -s $model ]]; then
        step replicas7b 300 bash -c '
          for d in 0 1; do
            "$0" bench -m "$1" --devices "cuda:$d" -p 512 -n 64 -b 64,256 --reps 2 \
              --json-file "$2/bench-replica-$d.json" --markdown-file "$2/bench-replica-$d.md" \
              >"$2/replica-$d.log" 2>&1 &
          done
          wait; cat "$2"/replica-0.log "$2"/replica-1.log' "$bin" "$model" "$logs"
        { echo "## LLaMA-2-7B shape, F16, two replicas (cuda:0 and cuda:1 at the same time)"; echo
          for d in 0 1; do echo "### cuda:$d"; echo; cat "$logs/bench-replica-$d.md"; echo; done
        } >"$OUT/bench-replicas.md"
      fi
      ;;
    bench)
      bin="$build/bench/cuda_kernels/cuda_kernels_bench"
      need_binary cuda_kernels_bench "$bin" &&
        step cuda_kernels_bench 300 "$bin" --csv "$logs/cuda_kernels_bench.csv" \
          --markdown "$OUT/kernels.md"
      ;;
    bench7b) bench7b ;;
    grammar7b) grammar7b ;;
    serve7b) serve7b ;;
    loadtest7b) loadtest7b ;;
    prefix7b) prefix7b ;;
    chunk7b) chunk7b ;;
    chunksweep7b) chunksweep7b ;;
    optimes7b) optimes7b ;;
    firstreq7b) firstreq7b ;;
    reload7b) reload7b ;;
    multi7b) multi7b ;;
    profile7b) profile7b ;;
    timeline7b) timeline7b ;;
    tp70b)
      # The LLaMA-2-70B shape in F16 (138 GB: more than one GPU holds, more than the disk),
      # synthesized into memory and run with tensor parallelism over every visible GPU
      # (TP70B_DEVICES, default 0,1); its ceiling is the summed copy bandwidth over 2 x 69 GB.
      bin="$build/src/cli/llamaserve"
      if need_binary tp70b "$bin"; then
        devices=${TP70B_DEVICES:-0,1}
        n=$(tr ',' '\n' <<<"$devices" | wc -l)
        read -r -a args <<<"${TP70B_ARGS:--p 512 -n 32 -b 1,16 --reps 2}"
        step "bench-70b-f16-tp$n" 560 "$bin" bench --synth llama2-70b:f16 \
          --synth-vocab "$build/fixtures/vocab-llama2-spm.gguf" --devices "$devices" --tp "$n" \
          "${args[@]}" --json-file "$logs/bench-70b-f16-tp$n.json" \
          --markdown-file "$OUT/bench-70b-f16-tp$n.md"
      fi
      ;;
    serve)
      # The HTTP server on GPUs: one GPU, tp=2 and 2 replicas on a synthetic tiny model, with
      # NVML metrics and a clean SIGTERM (scripts/gpu_serve_smoke.py).
      bin="$build/src/cli/llamaserve"
      if need_binary serve "$bin"; then
        tiny=/tmp/llamaserve-tiny-q8_0.gguf
        "$bin" synth --shape tiny --type q8_0 -o "$tiny" --progress none \
          --vocab "$build/fixtures/vocab-llama2-spm.gguf" >/dev/null 2>&1
        step serve 300 python3 scripts/gpu_serve_smoke.py "$bin" "$tiny"
      fi
      ;;
    *)
      note "$s" "FAIL (unknown step; steps: env tests bench bench7b grammar7b serve7b loadtest7b prefix7b chunk7b chunksweep7b optimes7b firstreq7b reload7b multi7b serve sanitize allreduce replicas7b transformers7b profile7b timeline7b tp70b)"
      failures=$((failures + 1))
      ;;
  esac
done

echo "=== summary ($failures failed)"
cat "$summary"
echo "failed steps: $failures" >>"$summary"
# Everything but the summary and the result tables travels back as one archive: the steps'
# other files (report.json, metrics.txt, ...) go into it under logs/results/ (the device hands
# back only a few files).
find "$OUT" -mindepth 1 -type f ! -name '*.md' ! -name summary.txt ! -path "$logs/*" -print0 |
  while IFS= read -r -d '' file; do
    kept="$logs/results/${file#"$OUT"/}"
    mkdir -p "$(dirname "$kept")" && mv "$file" "$kept"
  done
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$logs"
[[ $failures -eq 0 ]]
