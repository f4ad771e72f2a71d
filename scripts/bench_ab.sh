#!/usr/bin/env bash
# A/B timing of two llamaserve builds on the device, in one call: each layout's bench runs with
# the baseline binary and the candidate in turn, REPEATS times, so that drift and a warm-up
# order do not favour either; the decode rows of every run go to $OUT/bench-ab.md.
#
# Usage (device): OUT=... scripts/bench_ab.sh BASE_BIN NEW_BIN MODEL
#   AB_LAYOUTS  NAME/DEVICES/TP (default "one/0/1 tp2/0,1/2")
#   AB_ARGS     bench arguments (default "-p 16 -n 128 -b 1,4 --reps 3")
#   AB_REPEATS  rounds of base-then-candidate (default 2)
set -uo pipefail
: "${OUT:?set OUT}"
base=$1 new=$2 model=$3
mkdir -p "$OUT"
md=$OUT/bench-ab.md
read -r -a args <<<"${AB_ARGS:--p 16 -n 128 -b 1,4 --reps 3}"
read -r -a layouts <<<"${AB_LAYOUTS:-one/0/1 tp2/0,1/2}"
{
  echo "bench ${args[*]}"
  echo
  echo "| layout | round | binary | case | tok/s | ms/tok |"
  echo "| --- | ---: | --- | --- | ---: | ---: |"
} >"$md"
for layout in "${layouts[@]}"; do
  IFS=/ read -r name devices tp <<<"$layout"
  for ((round = 1; round <= ${AB_REPEATS:-2}; ++round)); do
    for which in base new; do
      bin=$base
      [[ $which == new ]] && bin=$new
      "$bin" bench -m "$model" --devices "$devices" --tp "$tp" "${args[@]}" \
        >"$OUT/ab-$name-$round-$which.log" 2>&1 || echo "| $name | $round | $which | FAILED | | |" >>"$md"
      # The bench's console table: columns apart by two spaces or more (a case's name has single
      # spaces): case, tokens, seconds, tok/s, ms/tok, ...
      python3 - "$OUT/ab-$name-$round-$which.log" "$name" "$round" "$which" >>"$md" <<'PY'
import re, sys
path, name, rnd, which = sys.argv[1:]
for line in open(path):
    cols = re.split(r"\s{2,}", line.strip())
    if len(cols) >= 5 and re.match(r"^(decode|batch|prompt) ", cols[0]):
        print(f"| {name} | {rnd} | {which} | {cols[0]} | {cols[3]} | {cols[4]} |")
PY
    done
  done
done
cat "$md"
