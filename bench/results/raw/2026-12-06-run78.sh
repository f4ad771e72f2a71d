#!/usr/bin/env bash
# $A (main) against $D (and $E where set), e.g. D=carry-f (quant_mma's ring passes in two row
# groups where they fill two waves, branch mma-row-steps): 7B Q4_K_M at 16/32/64 sequences in
# rotating rounds; Nsight Compute on a layer's four products at 64 rows; the GPU suites;
# LLaMA-3-8B Q4_K_M at 16 and 64 sequences while time is left.
set -u
: "${OUT:?}"
A=${A:-carry-a}
D=${D:-carry-d}
E=${E:-}
ROUNDS=${ROUNDS:-2}
DEADLINE=${DEADLINE:-420}
t0=$SECONDS
sum=$OUT/summary.txt
log() { echo "$* at $((SECONDS - t0)) s" | tee -a "$sum"; }
left() { (( SECONDS - t0 < DEADLINE - $1 )); }
python3 -c "import tarfile
for c in '$A $D $E'.split(): tarfile.open(f'build/{c}-pack/carry.tar.xz').extractall('build')"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$sum"
log unpacked
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
summ() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
print([(c.get("name"), round(c.get("tokens_per_s", 0), 1)) for c in d.get("cases", []) if not c.get("name").startswith("prompt")])' "$1" 2>/dev/null || head -c 300 "$1"; }
run() {  # carry model case args...
  local c=$1 m=$2 name=$3; shift 3
  LD_LIBRARY_PATH=$PWD/build/$c/runtime-libs timeout 150 build/$c/src/cli/llamaserve bench -m $m --device cuda:0 \
    --json-file "$OUT/$c-$name.json" "$@" > "$OUT/$c-$name.log" 2>&1
  log "$c $name rc=$? $(summ "$OUT/$c-$name.json")"
}
bin=build/$A/src/cli/llamaserve
m=/tmp/l2-q4_k_m.gguf
LD_LIBRARY_PATH=$PWD/build/$A/runtime-libs $bin synth --shape llama2-7b --type q4_k_m -o $m \
  --progress none --vocab build/$A/fixtures/vocab-llama2-spm.gguf > "$OUT/synth-q4_k_m.log" 2>&1
log "synth rc=$?"
for r in $(seq 1 "$ROUNDS"); do
  order="$A $D $E"; (( r % 2 == 0 )) && order="$E $D $A"
  for c in $order; do run $c $m 7b-$r --reps 2 -p 16 -n 128 -b 16,32,64; done
done
for c in $D $E; do
  [[ -n $ncu ]] || break
  LD_LIBRARY_PATH=$PWD/build/$c/runtime-libs timeout 60 "$ncu" --clock-control none \
    --profile-from-start off --kernel-name regex:quant_mma_kernel --launch-count 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters \
    --section ComputeWorkloadAnalysis --section InstructionStats \
    build/$c/src/cli/llamaserve bench -m $m --device cuda:0 -p 16 -n 8 -b 64 --profile-steps 1 \
    --profile-batch 64 --reps 1 > "$OUT/ncu-quant-mma-64-$c.txt" 2>&1
  log "ncu $c rc=$?"
done
rm -f $m
for c in $D $E; do
  left 150 || break
  BUILD_DIR=build/$c OUT=$OUT/suites-$c GPU_TESTS="cuda_kernels_test cuda_executor_test gpu_engine_test" \
    timeout 150 scripts/device_run.sh tests > "$OUT/suites-$c.log" 2>&1
  log "suites $c rc=$? $(grep -c PASS $OUT/suites-$c/summary.txt 2>/dev/null) PASS lines, $(grep -ci fail $OUT/suites-$c/summary.txt 2>/dev/null) FAIL lines"
  [[ -s $OUT/suites-$c/summary.txt ]] && cp $OUT/suites-$c/summary.txt $OUT/suites-$c-summary.log
  [[ -d $OUT/suites-$c/logs ]] && tar czf "$OUT/suites-$c-logs.tar.gz" -C "$OUT/suites-$c" logs
  rm -rf "$OUT/suites-$c"
done
model=/tmp/l3-q4_k_m.gguf
if left 110; then
  LD_LIBRARY_PATH=$PWD/build/$A/runtime-libs $bin synth --shape llama3-8b --type q4_k_m -o $model \
    --progress none --vocab tests/fixtures/vocab-llama3-bpe.gguf > "$OUT/synth-l3.log" 2>&1
  log "synth l3 rc=$?"
  i=0
  for c in $A $D $E $A; do
    left 15 || { log "deadline"; break; }
    i=$((i + 1))
    run $c $model l3-$i --reps 2 -p 16 -n 128 -b 16,64
  done
fi
rm -f $model
for f in "$OUT"/ncu-*.txt; do [[ -s $f ]] && gzip "$f"; done
tar czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls *.log *.json 2>/dev/null) && (cd "$OUT" && rm -f *.json *.log)
log done
