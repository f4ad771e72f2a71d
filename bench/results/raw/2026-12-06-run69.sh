#!/usr/bin/env bash
# $B's GPU suites, its grouped decode-attention table with and without programmatic dependent
# launch, then LLaMA-3-8B Q4_K_M decode of one sequence at 16, 2000 and 8000 prompt tokens and a
# kernel timeline of the 8000-token case.
set -u
: "${OUT:?}"
B=${B:-carry-h}
t0=$SECONDS
sum=$OUT/summary.txt
log() { echo "$* at $((SECONDS - t0)) s" | tee -a "$sum"; }
python3 -c "import tarfile; tarfile.open('build/$B-pack/carry.tar.xz').extractall('build')"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$sum"
log unpacked
if [[ -z ${SKIP_SUITES:-} ]]; then
  BUILD_DIR=build/$B OUT=$OUT/suites GPU_TESTS="cuda_kernels_test cuda_executor_test gpu_engine_test" \
    timeout 240 scripts/device_run.sh tests > "$OUT/suites.log" 2>&1
  log "suites rc=$?"
  cat "$OUT/suites/summary.txt" >> "$sum"
  tar czf "$OUT/suites-logs.tar.gz" -C "$OUT/suites" logs && rm -rf "$OUT/suites/logs"
fi
export LD_LIBRARY_PATH=$PWD/build/$B/runtime-libs
timeout 100 build/$B/bench/cuda_kernels/cuda_kernels_bench --only grouped \
  --markdown "$OUT/kernels-pdl.md" > "$OUT/kernels-pdl.log" 2>&1
log "kernels pdl rc=$?"
timeout 100 build/$B/bench/cuda_kernels/cuda_kernels_bench --only grouped --no-pdl \
  --markdown "$OUT/kernels-nopdl.md" > "$OUT/kernels-nopdl.log" 2>&1
log "kernels nopdl rc=$?"
voc=tests/fixtures/vocab-llama3-bpe.gguf
model=/tmp/l3-q4_k_m.gguf
[[ -s $model ]] || build/$B/src/cli/llamaserve synth --shape llama3-8b --type q4_k_m -o $model \
  --progress none --vocab $voc > "$OUT/synth.log" 2>&1
log "synth rc=$?"
summ() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
print([(c.get("name"), round(c.get("tokens_per_s", 0), 1)) for c in d.get("cases", [])])' "$1" 2>/dev/null || head -c 300 "$1"; }
for p in 16 2000 8000; do
  timeout 150 build/$B/src/cli/llamaserve bench -m $model --device cuda:0 --json-file "$OUT/q4-p$p.json" \
    --reps 3 -p $p -n 128 -b 1 --batch-prompt $p > "$OUT/q4-p$p.log" 2>&1
  log "q4 p$p rc=$? $(summ "$OUT/q4-p$p.json")"
done
lib=build/$B/bench/timeline/libkernel_timeline.so
cupti=$(python3 -c "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13', 'lib'))" 2>/dev/null)
[[ -e $cupti/libcupti.so.13 ]] || cupti=$(dirname "$(ls /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* 2>/dev/null | head -1)")
for p in 16 8000; do
  CUDA_INJECTION64_PATH=$PWD/$lib KERNEL_TIMELINE_CSV=$OUT/tl-p$p.csv LD_LIBRARY_PATH=$cupti:$LD_LIBRARY_PATH \
    timeout 150 build/$B/src/cli/llamaserve bench -m $model --device cuda:0 -p $p -n 64 -b 1 --batch-prompt 16 \
    --reps 3 --profile-steps 8 --profile-batch 1 --json-file "$OUT/tl-p$p.json" > "$OUT/tl-p$p.log" 2>&1
  log "timeline p$p rc=$?"
  python3 scripts/kernel_timeline.py "$OUT/tl-p$p.csv" --steps 8 --bench-json "$OUT/tl-p$p.json" \
    --case "decode b1" --title "LLaMA-3-8B q4_k_m, decode of one sequence after $p prompt tokens" >> "$OUT/timeline.md"
done
tar czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls *.log *.json *.csv 2>/dev/null) && (cd "$OUT" && rm -f *.json *.log *.csv)
log done
