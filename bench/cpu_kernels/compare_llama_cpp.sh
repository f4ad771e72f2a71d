#!/usr/bin/env bash
# Measures SmolLM2-135M Q4_1 prompt processing (256 tokens) and decode (short context) on the
# CPU with llamaserve's executor and with a llama.cpp build, at 1 and all threads, in
# alternating rounds (the machine is shared, so interleaving keeps the conditions alike),
# and writes the table with the raw outputs to bench/results/.
#
#   LLAMA_BENCH=/path/to/llama.cpp/build/bin/llama-bench bench/cpu_kernels/compare_llama_cpp.sh [build dir]
#
# llama.cpp is built outside this repository (for example from the sources that the PyPI
# package llama-cpp-python ships); nothing of it is committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
bench=$build/bench/cpu_kernels/cpu_kernels_bench
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
rounds=${ROUNDS:-2}
threads=$(nproc)
[[ -x $bench ]] || { echo "missing $bench (build target cpu_kernels_bench)" >&2; exit 1; }
[[ -f $model ]] || { echo "missing $model (scripts/fetch_model.sh)" >&2; exit 1; }

mkdir -p "$root/bench/results"
out=$root/bench/results/$(date -u +%Y-%m-%d)-cpu-smollm2-q4_1-vs-llama.cpp.md
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
declare -A ours_tg ours_pp ref_tg ref_pp
for ((r = 1; r <= rounds; ++r)); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "## round $r (load average $load)" >>"$raw"
  lb=$("$LLAMA_BENCH" -m "$model" -t "1,$threads" -p 256 -n 64 -r 3 -o csv 2>/dev/null)
  echo "$lb" >>"$raw"
  ob=$("$bench" --benchmark_filter='DecodeSmolLM2.*context:64|PrefillSmolLM2' --benchmark_format=csv 2>/dev/null)
  echo "$ob" >>"$raw"
  for t in 1 "$threads"; do
    # llama-bench csv: n_threads, n_prompt, n_gen, avg_ts are named columns.
    ref_pp[$r,$t]=$(echo "$lb" | python3 -c "import csv,sys; print(next(f'{float(x[\"avg_ts\"]):.1f}' for x in csv.DictReader(sys.stdin) if x['n_threads']=='$t' and x['n_prompt']=='256'))")
    ref_tg[$r,$t]=$(echo "$lb" | python3 -c "import csv,sys; print(next(f'{float(x[\"avg_ts\"]):.1f}' for x in csv.DictReader(sys.stdin) if x['n_threads']=='$t' and x['n_gen']=='64'))")
    ours_tg[$r,$t]=$(echo "$ob" | python3 -c "import csv,sys; print(next(f'{float(x[\"tok/s\"]):.1f}' for x in csv.DictReader(l for l in sys.stdin if l.startswith(('name','\"'))) if x['name'].startswith('DecodeSmolLM2_Q4_1/threads:$t/')))")
    ours_pp[$r,$t]=$(echo "$ob" | python3 -c "import csv,sys; print(next(f'{float(x[\"tok/s\"]):.1f}' for x in csv.DictReader(l for l in sys.stdin if l.startswith(('name','\"'))) if x['name'].startswith('PrefillSmolLM2_Q4_1/threads:$t/')))")
  done
done

{
  echo "# SmolLM2-135M-Instruct Q4_1 on the CPU: llamaserve vs llama.cpp"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- commit: $(git -C "$root" rev-parse --short HEAD)"
  echo "- device: $(lscpu | sed -n 's/^Model name: *//p'), $threads cores, $(lscpu | sed -n 's/^Flags:.*\(avx512f\).*/AVX-512 capable/p') (llamaserve: an x86-64-v3 build whose kernels take AVX-512 VNNI where the CPU has it)"
  echo "- llama.cpp: $("$LLAMA_BENCH" --version 2>&1 | head -1 || true) ($LLAMA_BENCH)"
  echo "- command: LLAMA_BENCH=... bench/cpu_kernels/compare_llama_cpp.sh"
  echo "- decode: llamaserve 'DecodeSmolLM2/context:64' (one sequence, context 64..192), llama.cpp 'tg64'"
  echo "- prompt: 256 tokens in one pass, llama.cpp 'pp256'"
  echo
  echo "| round | threads | decode tok/s llamaserve | decode tok/s llama.cpp | prompt tok/s llamaserve | prompt tok/s llama.cpp |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for ((r = 1; r <= rounds; ++r)); do
    for t in 1 "$threads"; do
      echo "| $r | $t | ${ours_tg[$r,$t]} | ${ref_tg[$r,$t]} | ${ours_pp[$r,$t]} | ${ref_pp[$r,$t]} |"
    done
  done
  echo
  echo "## Raw output"
  echo
  echo '```'
  cat "$raw"
  echo '```'
} >"$out"
echo "wrote $out"
