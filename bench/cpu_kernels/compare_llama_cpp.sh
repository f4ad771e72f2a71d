#!/usr/bin/env bash
# Measures SmolLM2-135M Q4_1 prompt processing (256 tokens) and decode (short context and at
# 1024 positions) on the CPU with llamaserve's executor and with a llama.cpp build, at 1 and all
# threads, in alternating rounds (the machine is shared, so interleaving keeps the conditions
# alike), beside the rate a pure read of the weights sets on the same machine
# (WeightReadSmolLM2), and writes the table with the raw outputs to bench/results/.
#
#   LLAMA_BENCH=/path/to/llama.cpp/build/bin/llama-bench bench/cpu_kernels/compare_llama_cpp.sh [build dir]
#
# llama.cpp is built outside this repository (for example from the sources that the PyPI
# package llama-cpp-python ships); nothing of it is committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/cpu}
bench=$build/bench/cpu_kernels/cpu_kernels_bench
model=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
rounds=${ROUNDS:-3}
deep=1024  # the long-context decode case's context (a DecodeSmolLM2 context argument)
threads=$(nproc)
[[ -x $bench ]] || { echo "missing $bench (build target cpu_kernels_bench)" >&2; exit 1; }
[[ -f $model ]] || { echo "missing $model (scripts/fetch_model.sh)" >&2; exit 1; }

mkdir -p "$root/bench/results"
out=$root/bench/results/$(date -u +%Y-%m-%d)-cpu-smollm2-q4_1-vs-llama.cpp.md
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

# The tok/s of the first csv row whose columns match, or "failed" (a case that did not run).
pick() {
  python3 -c '
import csv, sys
rows = csv.DictReader(l for l in sys.stdin if l.startswith(("name,", "build_commit,", "\"")))
want = dict(a.split("=", 1) for a in sys.argv[2:])
for row in rows:
    if all(row.get(k) == v or (k == "name" and row.get("name", "").startswith(v)) for k, v in want.items()):
        print(f"{float(row[sys.argv[1]]):.1f}")
        break
else:
    print("failed")
' "$@"
}

declare -A ours_tg ours_pp ref_tg ref_pp read_tg ours_deep ref_deep
for ((r = 1; r <= rounds; ++r)); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "## round $r (load average $load)" >>"$raw"
  # Decode and prompt in separate calls: a prompt case that dies (an instruction the machine
  # lacks) must not take the decode figures with it.
  lb_tg=$("$LLAMA_BENCH" -m "$model" -t "1,$threads" -p 0 -n 64 -r 3 -o csv 2>&1) || true
  lb_pp=$("$LLAMA_BENCH" -m "$model" -t "1,$threads" -p 256 -n 0 -r 3 -o csv 2>&1) || true
  lb_deep=$("$LLAMA_BENCH" -m "$model" -t "1,$threads" -p 0 -n 64 -d "$deep" -r 3 -o csv 2>&1) ||
    true
  echo "$lb_tg" >>"$raw"
  echo "$lb_pp" >>"$raw"
  echo "$lb_deep" >>"$raw"
  ob=$("$bench" --cpu-isa=auto \
    --benchmark_filter="DecodeSmolLM2.*/threads:(1|$threads)/context:(64|$deep)/|PrefillSmolLM2|WeightReadSmolLM2/threads:(1|$threads)/" \
    --benchmark_format=csv 2>/dev/null)
  echo "$ob" >>"$raw"
  # The case names without their kernel set ("avx512-vnni", ...), which auto picks per machine.
  ob=$(echo "$ob" | sed -e 's|^"DecodeSmolLM2_Q4_1/[a-z0-9-]*/|"DecodeSmolLM2_Q4_1/|' \
    -e 's|^"PrefillSmolLM2_Q4_1/[a-z0-9-]*/|"PrefillSmolLM2_Q4_1/|')
  for t in 1 "$threads"; do
    ref_tg[$r,$t]=$(echo "$lb_tg" | pick avg_ts n_threads="$t" n_gen=64)
    ref_pp[$r,$t]=$(echo "$lb_pp" | pick avg_ts n_threads="$t" n_prompt=256)
    ref_deep[$r,$t]=$(echo "$lb_deep" | pick avg_ts n_threads="$t" n_gen=64 n_depth="$deep")
    ours_tg[$r,$t]=$(echo "$ob" | pick tok/s name="DecodeSmolLM2_Q4_1/threads:$t/context:64/")
    ours_deep[$r,$t]=$(echo "$ob" | pick tok/s name="DecodeSmolLM2_Q4_1/threads:$t/context:$deep/")
    ours_pp[$r,$t]=$(echo "$ob" | pick tok/s name="PrefillSmolLM2_Q4_1/threads:$t/")
    read_tg[$r,$t]=$(echo "$ob" | pick tok/s name="WeightReadSmolLM2/threads:$t/")
  done
done

{
  echo "# SmolLM2-135M-Instruct Q4_1 on the CPU: llamaserve vs llama.cpp"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- commit: $(git -C "$root" rev-parse --short HEAD)"
  echo "- device: $(lscpu | sed -n 's/^Model name: *//p'), $threads cores, $(lscpu | sed -n 's/^Flags:.*\(avx512f\).*/AVX-512 capable/p') (llamaserve: an x86-64-v3 build whose kernels take AVX-512 VNNI where the CPU has it)"
  echo "- llama.cpp: $("$LLAMA_BENCH" --version 2>&1 | head -1 || true) ($LLAMA_BENCH)"
  echo "- model: $model"
  echo "- command: LLAMA_BENCH=... bench/cpu_kernels/compare_llama_cpp.sh ($rounds rounds)"
  echo "- decode: llamaserve 'DecodeSmolLM2/context:64' (one sequence, context 64..192), llama.cpp 'tg64'"
  echo "- decode deep: llamaserve 'DecodeSmolLM2/context:$deep' (context $deep..$((deep + 128))), llama.cpp 'tg64 @ d$deep' (context $deep..$((deep + 64)))"
  echo "- prompt: 256 tokens in one pass, llama.cpp 'pp256'"
  echo "- read ceiling: 'WeightReadSmolLM2', the decode rate of a loop that only reads the model's weight bytes once a token with that many threads (the memory's limit for any engine)"
  echo
  echo "| round | threads | decode tok/s llamaserve | decode tok/s llama.cpp | read ceiling tok/s | decode at $deep tok/s llamaserve | decode at $deep tok/s llama.cpp | prompt tok/s llamaserve | prompt tok/s llama.cpp |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for ((r = 1; r <= rounds; ++r)); do
    for t in 1 "$threads"; do
      echo "| $r | $t | ${ours_tg[$r,$t]} | ${ref_tg[$r,$t]} | ${read_tg[$r,$t]} | ${ours_deep[$r,$t]} | ${ref_deep[$r,$t]} | ${ours_pp[$r,$t]} | ${ref_pp[$r,$t]} |"
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
