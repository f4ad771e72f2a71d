#!/usr/bin/env bash
# On an H200: run80.sh (the target table). Elsewhere: $A (main) against $B (the split combine
# reading each chunk's maxima, sums and P·V sums in one round trip, online), LLaMA-3-8B Q4_K_M
# one sequence of 2000+128 and 8000+128 and four of 2000+128, 7B Q4_K_M 16 and 64 sequences,
# in rotating rounds; the GPU suites on $B; Nsight Compute's SASS source page of $B's
# tensor-core decode attention at 8000 positions while time is left.
set -u
: "${OUT:?}"
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [[ $name == *H200* ]]; then
  exec bash build/devscripts/run80.sh
fi
A=${A:-carry-a}
B=${B:-carry-g}
ROUNDS=${ROUNDS:-2}
DEADLINE=${DEADLINE:-470}
t0=$SECONDS
sum=$OUT/summary.txt
log() { echo "$* at $((SECONDS - t0)) s" | tee -a "$sum"; }
left() { (( SECONDS - t0 < DEADLINE - $1 )); }
python3 -c "import tarfile
for c in '$A $B'.split(): tarfile.open(f'build/{c}-pack/carry.tar.xz').extractall('build')"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$sum"
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
m7=/tmp/l2-q4_k_m.gguf
m8=/tmp/l3-q4_k_m.gguf
LD_LIBRARY_PATH=$PWD/build/$A/runtime-libs $bin synth --shape llama2-7b --type q4_k_m -o $m7 \
  --progress none --vocab build/$A/fixtures/vocab-llama2-spm.gguf > "$OUT/synth-7b.log" 2>&1 &
LD_LIBRARY_PATH=$PWD/build/$A/runtime-libs $bin synth --shape llama3-8b --type q4_k_m -o $m8 \
  --progress none --vocab tests/fixtures/vocab-llama3-bpe.gguf > "$OUT/synth-l3.log" 2>&1 &
wait
log "synth $(ls $m7 $m8 2>/dev/null | wc -l) files"
for r in $(seq 1 "$ROUNDS"); do
  order="$A $B"; (( r % 2 == 0 )) && order="$B $A"
  for c in $order; do
    left 60 || { log "deadline"; break 2; }
    run $c $m8 p2000-$r --reps 3 -p 16 -n 128 -b 1 --batch-prompt 2000
    run $c $m8 p8000-$r --reps 3 -p 16 -n 128 -b 1 --batch-prompt 8000
    run $c $m8 b4-$r --reps 3 -p 16 -n 128 -b 4 --batch-prompt 2000
    run $c $m7 7b-$r --reps 2 -p 16 -n 128 -b 16,64
  done
done
if left 130; then
  BUILD_DIR=build/$B OUT=$OUT/suites-$B GPU_TESTS="cuda_kernels_test cuda_executor_test gpu_engine_test" \
    timeout 150 scripts/device_run.sh tests > "$OUT/suites-$B.log" 2>&1
  log "suites $B rc=$? $(grep -c PASS $OUT/suites-$B/summary.txt 2>/dev/null) PASS lines"
  [[ -s $OUT/suites-$B/summary.txt ]] && cp $OUT/suites-$B/summary.txt $OUT/suites-$B-summary.log
  rm -rf "$OUT/suites-$B"
fi
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [[ -n $ncu ]] && left 60; then
  LD_LIBRARY_PATH=$PWD/build/$B/runtime-libs timeout 100 "$ncu" --clock-control none \
    --profile-from-start off --kernel-name regex:attention_decode_mma --launch-count 1 --set full \
    --import-source no -f -o "$OUT/attention-8000" build/$B/src/cli/llamaserve bench -m $m8 \
    --device cuda:0 -p 16 -n 8 -b 1 --batch-prompt 8000 --profile-steps 1 --profile-batch 1 \
    --reps 1 > "$OUT/ncu-attention-8000.log" 2>&1
  log "ncu rc=$?"
  "$ncu" -i "$OUT/attention-8000.ncu-rep" --page source --csv --print-source sass \
    > "$OUT/ncu-attention-8000-sass.csv" 2>&1
  log "source page rc=$? $(wc -l < "$OUT/ncu-attention-8000-sass.csv") lines"
  "$ncu" -i "$OUT/attention-8000.ncu-rep" --page details > "$OUT/ncu-attention-8000-details.txt" 2>&1
  rm -f "$OUT/attention-8000.ncu-rep"
fi
rm -f $m7 $m8
for f in "$OUT"/ncu-*.txt "$OUT"/ncu-*.csv; do [[ -s $f ]] && gzip "$f"; done
tar czf "$OUT/logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls *.log *.json 2>/dev/null) && (cd "$OUT" && rm -f *.json *.log)
log done
