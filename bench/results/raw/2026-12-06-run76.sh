#!/usr/bin/env bash
# In order of need, each step only while time is left:
#  1. 7B Q4_K_M at 1/16/64 sequences, $A against $C (row groups sharing the activation ring) in
#     alternating rounds; Nsight Compute on a layer's four quant_mma products at 64 rows ($A, $C);
#  2. the GPU suites on $C, then on $B (one-pass split combine);
#  3. LLaMA-3-8B Q4_K_M (f16 cache), one sequence of 2000/8000+128 and four of 2000+128, $A
#     against $B in alternating rounds;
#  4. Nsight Compute on $A's tensor-core decode attention at 8000 positions;
#  5. 7B F16 (1/256) and Q8_0 (1/4) on $A.
set -u
: "${OUT:?}"
A=${A:-carry-a}
B=${B:-carry-b}
C=${C:-carry-c}
ROUNDS=${ROUNDS:-2}
DEADLINE=${DEADLINE:-540}
t0=$SECONDS
sum=$OUT/summary.txt
log() { echo "$* at $((SECONDS - t0)) s" | tee -a "$sum"; }
left() { (( SECONDS - t0 < DEADLINE - $1 )); }
python3 -c "import tarfile
for c in ('$A', '$B', '$C'): tarfile.open(f'build/{c}-pack/carry.tar.xz').extractall('build')"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$sum"
log unpacked
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
log "ncu: $ncu"
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
synth2() {  # type
  LD_LIBRARY_PATH=$PWD/build/$A/runtime-libs $bin synth --shape llama2-7b --type $1 -o /tmp/l2-$1.gguf \
    --progress none --vocab build/$A/fixtures/vocab-llama2-spm.gguf > "$OUT/synth-$1.log" 2>&1
  log "synth $1 rc=$?"
}
ncu_mma() {  # carry
  LD_LIBRARY_PATH=$PWD/build/$1/runtime-libs timeout 100 "$ncu" --clock-control none \
    --profile-from-start off --kernel-name regex:quant_mma_kernel --launch-count 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters \
    --section ComputeWorkloadAnalysis --section InstructionStats \
    build/$1/src/cli/llamaserve bench -m $m --device cuda:0 -p 16 -n 8 -b 64 --profile-steps 1 \
    --profile-batch 64 --reps 1 > "$OUT/ncu-quant-mma-64-$1.txt" 2>&1
  log "ncu quant_mma $1 rc=$?"
}
m=/tmp/l2-q4_k_m.gguf
synth2 q4_k_m
for r in $(seq 1 "$ROUNDS"); do
  order="$A $C"; (( r % 2 == 0 )) && order="$C $A"
  for c in $order; do run $c $m 7b-q4_k_m-$r --reps 2 -p 16 -n 128 -b 1,16,64; done
done
[[ -n $ncu ]] && ncu_mma $A
[[ -n $ncu ]] && left 400 && ncu_mma $C
rm -f $m
for c in $C $B; do
  [[ -z ${SKIP_SUITES:-} ]] && left 280 || break
  BUILD_DIR=build/$c OUT=$OUT/suites-$c GPU_TESTS="cuda_kernels_test cuda_executor_test gpu_engine_test" \
    timeout 240 scripts/device_run.sh tests > "$OUT/suites-$c.log" 2>&1
  log "suites $c rc=$? $(cat $OUT/suites-$c/summary.txt 2>/dev/null | tr '\n' ' ' | head -c 300)"
done
model=/tmp/l3-q4_k_m.gguf
if left 200; then
  LD_LIBRARY_PATH=$PWD/build/$A/runtime-libs $bin synth --shape llama3-8b --type q4_k_m -o $model \
    --progress none --vocab tests/fixtures/vocab-llama3-bpe.gguf > "$OUT/synth.log" 2>&1
  log "synth l3 rc=$?"
  for r in $(seq 1 "$ROUNDS"); do
    order="$A $B"; (( r % 2 == 0 )) && order="$B $A"
    for c in $order; do
      left 60 || { log "deadline"; break 2; }
      run $c $model p2000-$r --reps 3 -p 16 -n 128 -b 1 --batch-prompt 2000
      run $c $model p8000-$r --reps 3 -p 16 -n 128 -b 1 --batch-prompt 8000
      run $c $model b4-$r --reps 3 -p 16 -n 128 -b 4 --batch-prompt 2000
    done
  done
fi
if [[ -n $ncu && -s $model ]] && left 130; then
  LD_LIBRARY_PATH=$PWD/build/$A/runtime-libs timeout 120 "$ncu" --clock-control none --profile-from-start off \
    --kernel-name regex:attention_decode_mma --launch-count 2 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section SourceCounters \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
    $bin bench -m $model --device cuda:0 -p 16 -n 8 -b 1 --batch-prompt 8000 \
    --profile-steps 1 --profile-batch 1 --reps 1 > "$OUT/ncu-attention-8000.txt" 2>&1
  log "ncu attention rc=$?"
fi
rm -f $model
for t in f16 q8_0; do
  left 60 || { log "deadline"; break; }
  synth2 $t
  case $t in
    f16) run $A /tmp/l2-$t.gguf 7b-$t --reps 2 -p 16 -n 128 -b 1,256 ;;
    q8_0) run $A /tmp/l2-$t.gguf 7b-$t --reps 2 -p 16 -n 128 -b 1,4 ;;
  esac
  rm -f /tmp/l2-$t.gguf
done
for c in $B $C; do
  [[ -d $OUT/suites-$c/logs ]] && tar czf "$OUT/suites-$c-logs.tar.gz" -C "$OUT/suites-$c" logs && rm -rf "$OUT/suites-$c/logs"
done
for f in "$OUT"/ncu-*.txt; do [[ -s $f ]] && gzip -k "$f"; done
tar czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls *.log *.json 2>/dev/null) && (cd "$OUT" && rm -f *.json *.log)
log done
