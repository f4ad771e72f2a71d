#!/usr/bin/env bash
# carry-l (main) against carry-m (branch): the GPU suites on carry-m, its decode-attention tables,
# then LLaMA-3-8B F16 and Q4_K_M (f16 cache) in alternating rounds.
set -u
: "${OUT:?}"
ROUNDS=${ROUNDS:-2}
DEADLINE=${DEADLINE:-540}
t0=$SECONDS
sum=$OUT/summary.txt
log() { echo "$* at $((SECONDS - t0)) s" | tee -a "$sum"; }
python3 -c 'import tarfile
for c in ("carry-l", "carry-m"): tarfile.open(f"build/{c}-pack/carry.tar.xz").extractall("build")'
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$sum"
log unpacked
if [[ -z ${SKIP_SUITES:-} ]]; then
  BUILD_DIR=build/carry-m OUT=$OUT/suites GPU_TESTS="cuda_kernels_test cuda_executor_test gpu_engine_test" \
    timeout 240 scripts/device_run.sh tests > "$OUT/suites.log" 2>&1
  log "suites rc=$?"
  cat "$OUT/suites/summary.txt" >> "$sum"
  tar czf "$OUT/suites-logs.tar.gz" -C "$OUT/suites" logs && rm -rf "$OUT/suites/logs"
fi
export LD_LIBRARY_PATH=$PWD/build/carry-m/runtime-libs
timeout 120 build/carry-m/bench/cuda_kernels/cuda_kernels_bench --only decode-attention,grouped \
  --markdown "$OUT/kernels.md" > "$OUT/kernels.log" 2>&1
log "kernels rc=$?"
voc=tests/fixtures/vocab-llama3-bpe.gguf
for t in f16 q4_k_m; do
  [[ -s /tmp/l3-$t.gguf ]] || build/carry-l/src/cli/llamaserve synth --shape llama3-8b --type $t -o /tmp/l3-$t.gguf \
    --progress none --vocab $voc > "$OUT/synth-$t.log" 2>&1
  log "synth $t rc=$?"
done
summ() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
print([(c.get("name"), round(c.get("tokens_per_s", 0), 1)) for c in d.get("cases", [])])' "$1" 2>/dev/null || head -c 300 "$1"; }
run() {  # carry case model args...
  local c=$1 name=$2 model=$3; shift 3
  LD_LIBRARY_PATH=$PWD/build/$c/runtime-libs timeout 150 build/$c/src/cli/llamaserve bench -m "$model" --device cuda:0 \
    --json-file "$OUT/$c-$name.json" "$@" > "$OUT/$c-$name.log" 2>&1
  local rc=$?
  log "$c $name rc=$rc $(summ "$OUT/$c-$name.json")"
}
for r in $(seq 1 "$ROUNDS"); do
  order="carry-l carry-m"; (( r % 2 == 0 )) && order="carry-m carry-l"
  for c in $order; do
    (( SECONDS - t0 > DEADLINE )) && { log "deadline"; break 2; }
    run $c f16-b-$r /tmp/l3-f16.gguf --reps 2 -p 16 -n 128 -b 1,16,256
    run $c f16-deep-$r /tmp/l3-f16.gguf --reps 2 -p 16 -n 128 -b 1,16 --batch-prompt 2000
    run $c q4km-b-$r /tmp/l3-q4_k_m.gguf --reps 2 -p 16 -n 128 -b 1,16,64
  done
done
tar czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls *.log *.json 2>/dev/null) && (cd "$OUT" && rm -f *.json carry-*.log)
log done
