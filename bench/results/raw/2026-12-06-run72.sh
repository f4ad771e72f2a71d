#!/usr/bin/env bash
# $A, $B and $C: the GPU suites on $C, each build's grouped decode-attention table, then
# LLaMA-3-8B Q4_K_M (f16 cache) in rotating rounds: one sequence at 2000 and 8000 prompt
# tokens, four at 2000, 16/64 sequences at 128; a kernel timeline of the 8000-token case on $C.
set -u
: "${OUT:?}"
A=${A:-carry-h}
B=${B:-carry-c}
C=${C:-carry-s}
ROUNDS=${ROUNDS:-2}
DEADLINE=${DEADLINE:-480}
t0=$SECONDS
sum=$OUT/summary.txt
log() { echo "$* at $((SECONDS - t0)) s" | tee -a "$sum"; }
python3 -c "import tarfile
for c in ('$A', '$B', '$C'): tarfile.open(f'build/{c}-pack/carry.tar.xz').extractall('build')"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$sum"
log unpacked
if [[ -z ${SKIP_SUITES:-} ]]; then
  BUILD_DIR=build/$C OUT=$OUT/suites GPU_TESTS="cuda_kernels_test cuda_executor_test gpu_engine_test" \
    timeout 240 scripts/device_run.sh tests > "$OUT/suites.log" 2>&1
  log "suites rc=$?"
fi
for c in $A $B $C; do
  [[ -n ${SKIP_KERNELS:-} ]] && break
  LD_LIBRARY_PATH=$PWD/build/$c/runtime-libs timeout 100 build/$c/bench/cuda_kernels/cuda_kernels_bench \
    --only grouped --markdown "$OUT/kernels-$c.md" > "$OUT/kernels-$c.log" 2>&1
  log "kernels $c rc=$?"
done
voc=tests/fixtures/vocab-llama3-bpe.gguf
model=/tmp/l3-q4_k_m.gguf
[[ -s $model ]] || LD_LIBRARY_PATH=$PWD/build/$B/runtime-libs build/$B/src/cli/llamaserve synth --shape llama3-8b --type q4_k_m -o $model \
  --progress none --vocab $voc > "$OUT/synth.log" 2>&1
log "synth rc=$?"
summ() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
print([(c.get("name"), round(c.get("tokens_per_s", 0), 1)) for c in d.get("cases", []) if not c.get("name").startswith("prompt")])' "$1" 2>/dev/null || head -c 300 "$1"; }
run() {  # carry case args...
  local c=$1 name=$2; shift 2
  LD_LIBRARY_PATH=$PWD/build/$c/runtime-libs timeout 150 build/$c/src/cli/llamaserve bench -m $model --device cuda:0 \
    --json-file "$OUT/$c-$name.json" "$@" > "$OUT/$c-$name.log" 2>&1
  log "$c $name rc=$? $(summ "$OUT/$c-$name.json")"
}
for r in $(seq 1 "$ROUNDS"); do
  order="$A $B $C"; (( r % 2 == 0 )) && order="$C $B $A"
  for c in $order; do
    (( SECONDS - t0 > DEADLINE )) && { log "deadline"; break 2; }
    run $c p2000-$r --reps 3 -p 16 -n 128 -b 1 --batch-prompt 2000
    run $c p8000-$r --reps 3 -p 16 -n 128 -b 1 --batch-prompt 8000
    run $c b4-$r --reps 3 -p 16 -n 128 -b 4 --batch-prompt 2000
    run $c b-$r --reps 2 -p 16 -n 128 -b 16,64
  done
done
lib=bench/timeline/libkernel_timeline.so
cupti=$(python3 -c "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13', 'lib'))" 2>/dev/null)
[[ -e $cupti/libcupti.so.13 ]] || cupti=$(dirname "$(ls /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* 2>/dev/null | head -1)")
for c in $C; do
  (( SECONDS - t0 > DEADLINE + 40 )) && break
  CUDA_INJECTION64_PATH=$PWD/build/$c/$lib KERNEL_TIMELINE_CSV=$OUT/tl-$c.csv \
    LD_LIBRARY_PATH=$cupti:$PWD/build/$c/runtime-libs timeout 100 build/$c/src/cli/llamaserve bench -m $model \
    --device cuda:0 -p 16 -n 64 -b 1 --batch-prompt 8000 --reps 2 --profile-steps 8 --profile-batch 1 \
    --json-file "$OUT/tl-$c.json" > "$OUT/tl-$c.log" 2>&1
  log "timeline $c rc=$?"
  python3 scripts/kernel_timeline.py "$OUT/tl-$c.csv" --steps 8 --bench-json "$OUT/tl-$c.json" \
    --case "batch 1 x" --title "$c: LLaMA-3-8B q4_k_m, decode of one sequence after 8000 positions" >> "$OUT/timeline.md"
done
[[ -d $OUT/suites/logs ]] && tar czf "$OUT/suites-logs.tar.gz" -C "$OUT/suites" logs && rm -rf "$OUT/suites/logs"
tar czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls *.log *.json *.csv 2>/dev/null) && (cd "$OUT" && rm -f *.json *.log *.csv)
log done
