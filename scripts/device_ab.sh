#!/usr/bin/env bash
# Timing of several builds against each other in one device call: the models synthesized side
# by side first, then every case with every build in rotating rounds (forward, then backward,
# so that neither drift nor warm-up order favours one), the GPU suites on the builds named, all
# under a deadline so the call returns what it measured. Builds are the folders that
# scripts/gpu_carry.sh stages (carried packed as <build>-pack is enough: they are unpacked
# first).
#
# Usage (device): OUT=... AB_BUILDS="carry-a carry-b" AB_MODELS=... AB_CASES=... \
#                 scripts/device_ab.sh
#   AB_BUILDS      the builds, the first one the baseline (under AB_BUILD_ROOT, default build)
#   AB_MODELS      KEY=SHAPE:TYPE ... synthesized into $AB_MODEL_DIR (default /tmp) by the first
#                  build, e.g. "l3=llama3-8b:q4_k_m 7b=llama2-7b:q4_k_m" (the fixtures'
#                  vocabularies for the llama2 and llama3 shapes)
#   AB_CASES       NAME|KEY|BENCH ARGS, separated by ';', e.g.
#                  "p8000|l3|--reps 3 -p 16 -n 128 -b 1 --batch-prompt 8000;b64|7b|-b 64"
#   AB_ROUNDS      rounds over the builds (default 2)
#   AB_SUITES      builds whose GPU suites run after the first round (default none)
#   AB_GPU_TESTS   those suites (default "cuda_kernels_test cuda_executor_test gpu_engine_test")
#   AB_DEADLINE    seconds after which no case or suite starts (default 420)
#   AB_DEVICE      bench's --device (default cuda:0)
# Writes $OUT/summary.txt (one line a step, as it ran), $OUT/bench-ab.md (every bench case of
# every run: the table scripts/gpu_result.py takes in) and $OUT/logs.tar.gz (logs and JSON).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
: "${OUT:?set OUT to the directory for the results}"
mkdir -p "$OUT"
read -r -a builds <<<"${AB_BUILDS:?name the builds, the baseline first}"
read -r -a models <<<"${AB_MODELS:?name the models as KEY=SHAPE:TYPE}"
IFS=';' read -r -a cases <<<"${AB_CASES:?name the cases as NAME|KEY|ARGS;...}"
build_root=${AB_BUILD_ROOT:-build}
model_dir=${AB_MODEL_DIR:-/tmp}
deadline=${AB_DEADLINE:-420}
device=${AB_DEVICE:-cuda:0}
summary=$OUT/summary.txt
md=$OUT/bench-ab.md
logs=$OUT/logs
mkdir -p "$logs"
: >"$summary"
t0=$SECONDS
log() { echo "$* at $((SECONDS - t0)) s" | tee -a "$summary"; }
# left SECONDS: whether a step that takes about that long still ends before the deadline.
left() { ((SECONDS - t0 < deadline - $1)); }

for b in "${builds[@]}"; do
  pack=$build_root/$b-pack/carry.tar.xz
  if [[ -s $pack ]]; then
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$pack" "$build_root"
  fi
  [[ -x $build_root/$b/src/cli/llamaserve ]] || { log "no $build_root/$b/src/cli/llamaserve"; exit 1; }
done
command -v nvidia-smi >/dev/null &&
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$summary"

# run_bin BUILD SECONDS ARGS...: the build's llamaserve with its runtime libraries, for at most
# SECONDS.
run_bin() {
  local b=$1 seconds=$2
  shift 2
  timeout "$seconds" env \
    LD_LIBRARY_PATH="$root/$build_root/$b/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$build_root/$b/src/cli/llamaserve" "$@"
}

declare -A model_path
for m in "${models[@]}"; do
  key=${m%%=*}
  spec=${m#*=}
  shape=${spec%%:*}
  type=${spec#*:}
  path=$model_dir/ab-$key-$shape-$type.gguf
  model_path[$key]=$path
  vocab=()
  case $shape in
    llama2*) vocab=(--vocab "$build_root/${builds[0]}/fixtures/vocab-llama2-spm.gguf") ;;
    llama3*) vocab=(--vocab tests/fixtures/vocab-llama3-bpe.gguf) ;;
  esac
  [[ ${#vocab[@]} -gt 0 && ! -s ${vocab[1]} ]] && vocab=()
  run_bin "${builds[0]}" 420 synth --shape "$shape" --type "$type" -o "$path" --progress none \
    "${vocab[@]}" >"$logs/synth-$key.log" 2>&1 &
done
wait
for m in "${models[@]}"; do
  key=${m%%=*}
  [[ -s ${model_path[$key]} ]] || { log "synth $key failed (logs/synth-$key.log)"; exit 1; }
done
log "synth ${#models[@]} models"

{
  echo "| round | build | case | bench case | tok/s |"
  echo "| ---: | --- | --- | --- | ---: |"
} >"$md"
# one ROUND BUILD CASE: the case's bench with the build, its cases into the table and one line
# (the decode-and-batch cases' tok/s) into the summary.
one() {
  local round=$1 b=$2 name key args json
  IFS='|' read -r name key args <<<"$3"
  json=$logs/$b-$name-$round.json
  read -r -a args <<<"$args"
  run_bin "$b" 300 bench -m "${model_path[$key]}" --device "$device" "${args[@]}" \
    --json-file "$json" >"$logs/$b-$name-$round.log" 2>&1
  local rc=$?
  local line
  line=$(python3 - "$json" "$round" "$b" "$name" "$md" <<'PY'
import json, sys
path, rnd, build, name, md = sys.argv[1:]
try:
    cases = json.load(open(path))["cases"]
except (OSError, ValueError, KeyError):
    print("no results")
    sys.exit()
with open(md, "a") as out:
    for c in cases:
        out.write(f"| {rnd} | {build} | {name} | {c['name']} | {c['tokens_per_s']:.1f} |\n")
print([(c["name"], round(c["tokens_per_s"], 1)) for c in cases if not c["name"].startswith("prompt")])
PY
)
  log "$b $name-$round rc=$rc $line"
}

suites() {
  local b=$1
  BUILD_DIR=$build_root/$b OUT=$OUT/suites-$b \
    GPU_TESTS="${AB_GPU_TESTS:-cuda_kernels_test cuda_executor_test gpu_engine_test}" \
    timeout 200 scripts/device_run.sh tests >"$logs/suites-$b.log" 2>&1
  local rc=$?
  log "suites $b rc=$rc, $(grep -c PASS "$OUT/suites-$b/summary.txt" 2>/dev/null) suites passed," \
    "$(grep -h 'failed steps' "$OUT/suites-$b/summary.txt" 2>/dev/null)"
  [[ -s $OUT/suites-$b/summary.txt ]] && cp "$OUT/suites-$b/summary.txt" "$OUT/suites-$b-summary.md"
  rm -rf "$OUT/suites-$b"
}

read -r -a suite_builds <<<"${AB_SUITES:-}"
for ((round = 1; round <= ${AB_ROUNDS:-2}; ++round)); do
  order=("${builds[@]}")
  if ((round % 2 == 0)); then
    order=()
    for ((i = ${#builds[@]} - 1; i >= 0; --i)); do order+=("${builds[i]}"); done
  fi
  for b in "${order[@]}"; do
    for c in "${cases[@]}"; do
      left 20 || { log "deadline: round $round stops before $b ${c%%|*}"; break 3; }
      one "$round" "$b" "$c"
    done
  done
  if ((round == 1)); then
    for b in "${suite_builds[@]}"; do
      left 60 && suites "$b"
    done
  fi
done
for m in "${models[@]}"; do rm -f "${model_path[${m%%=*}]}"; done
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$logs"
log done
