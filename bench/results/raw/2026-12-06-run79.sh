#!/usr/bin/env bash
# Where three kernels' warps wait, instruction by instruction (Nsight Compute's full set and its
# source page in SASS), on $A's binaries: the tensor-core decode attention at one sequence of
# 8000 positions (LLaMA-3-8B Q4_K_M, f16 cache), the 64-row SwiGLU quant_mma pass and layer 0's
# one-row matvecs (7B Q4_K_M).
set -u
: "${OUT:?}"
A=${A:-carry-a}
t0=$SECONDS
sum=$OUT/summary.txt
log() { echo "$* at $((SECONDS - t0)) s" | tee -a "$sum"; }
python3 -c "import tarfile; tarfile.open('build/$A-pack/carry.tar.xz').extractall('build')"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$sum"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
log "ncu: $ncu"
bin=build/$A/src/cli/llamaserve
export LD_LIBRARY_PATH=$PWD/build/$A/runtime-libs
m7=/tmp/l2-q4_k_m.gguf
m8=/tmp/l3-q4_k_m.gguf
$bin synth --shape llama2-7b --type q4_k_m -o $m7 --progress none \
  --vocab build/$A/fixtures/vocab-llama2-spm.gguf > "$OUT/synth-7b.log" 2>&1 &
$bin synth --shape llama3-8b --type q4_k_m -o $m8 --progress none \
  --vocab tests/fixtures/vocab-llama3-bpe.gguf > "$OUT/synth-l3.log" 2>&1 &
wait
log "synth $(ls -la $m7 $m8 | wc -l) files"
# profile NAME KERNEL_REGEX SKIP COUNT MODEL BENCH_ARGS...
profile() {
  local name=$1 kernel=$2 skip=$3 count=$4 model=$5
  shift 5
  timeout 170 "$ncu" --clock-control none --profile-from-start off --kernel-name "regex:$kernel" \
    --launch-skip "$skip" --launch-count "$count" --set full --import-source no \
    -f -o "$OUT/$name" $bin bench -m $model --device cuda:0 "$@" > "$OUT/ncu-$name.log" 2>&1
  log "ncu $name rc=$?"
  "$ncu" -i "$OUT/$name.ncu-rep" --page details > "$OUT/ncu-$name-details.txt" 2>&1
  "$ncu" -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass \
    > "$OUT/ncu-$name-sass.csv" 2>&1
  log "source page $name rc=$? $(wc -l < "$OUT/ncu-$name-sass.csv") lines"
  rm -f "$OUT/$name.ncu-rep"
}
profile attention-8000 attention_decode_mma 0 1 $m8 -p 16 -n 8 -b 1 --batch-prompt 8000 \
  --profile-steps 1 --profile-batch 1 --reps 1
profile quant-mma-swiglu-64 quant_mma_kernel 3 1 $m7 -p 16 -n 8 -b 64 --profile-steps 1 \
  --profile-batch 64 --reps 1
profile matvec-b1 matvec_kernel 0 5 $m7 -p 16 -n 8 -b 1 --profile-steps 1 --profile-batch 1 --reps 1
rm -f $m7 $m8
for f in "$OUT"/ncu-*; do [[ -s $f ]] && gzip "$f"; done
log done
