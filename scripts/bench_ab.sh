#!/usr/bin/env bash
# A/B timing of two llamaserve builds on the device, in one call: each layout's bench runs with
# the baseline binary and the candidate in turn, REPEATS times, so that drift and a warm-up
# order do not favour either; every case of every run goes to $OUT/bench-ab.md (from bench's
# --json-file; the console logs stay beside it).
#
# Usage (device): OUT=... scripts/bench_ab.sh BASE_BIN NEW_BIN MODEL
#   AB_LAYOUTS  NAME/DEVICES/TP (default "one/0/1 tp2/0,1/2")
#   AB_ARGS     bench arguments (default "-p 16 -n 128 -b 1,4 --reps 3")
#   AB_REPEATS  rounds of base-then-candidate (default 2)
#   AB_BASE_ARGS, AB_NEW_ARGS  more bench arguments for each side's runs (default none), so
#               that one binary can be timed against itself with a switch, e.g.
#               AB_BASE_ARGS=--no-pdl scripts/bench_ab.sh BIN BIN MODEL
#   AB_BASE_ENV, AB_NEW_ENV  NAME=VALUE environment for each side's runs (default none)
set -uo pipefail
: "${OUT:?set OUT}"
base=$1 new=$2 model=$3
mkdir -p "$OUT"
md=$OUT/bench-ab.md
read -r -a args <<<"${AB_ARGS:--p 16 -n 128 -b 1,4 --reps 3}"
read -r -a layouts <<<"${AB_LAYOUTS:-one/0/1 tp2/0,1/2}"
read -r -a base_env <<<"${AB_BASE_ENV:-}"
read -r -a new_env <<<"${AB_NEW_ENV:-}"
read -r -a base_args <<<"${AB_BASE_ARGS:-}"
read -r -a new_args <<<"${AB_NEW_ARGS:-}"
{
  echo "bench ${args[*]}"
  echo
  echo "base: ${base_env[*]} $base ${base_args[*]}; new: ${new_env[*]} $new ${new_args[*]}"
  echo
  echo "| layout | round | binary | case | tok/s | ms/tok |"
  echo "| --- | ---: | --- | --- | ---: | ---: |"
} >"$md"
for layout in "${layouts[@]}"; do
  IFS=/ read -r name devices tp <<<"$layout"
  for ((round = 1; round <= ${AB_REPEATS:-2}; ++round)); do
    for which in base new; do
      bin=$base
      settings=("${base_env[@]}")
      extra=("${base_args[@]}")
      if [[ $which == new ]]; then
        bin=$new
        settings=("${new_env[@]}")
        extra=("${new_args[@]}")
      fi
      json=$OUT/ab-$name-$round-$which.json
      env "${settings[@]}" "$bin" bench -m "$model" --devices "$devices" --tp "$tp" "${args[@]}" \
        "${extra[@]}" --json-file "$json" \
        >"$OUT/ab-$name-$round-$which.log" 2>&1 || echo "| $name | $round | $which | FAILED | | |" >>"$md"
      [[ -s $json ]] || continue
      python3 - "$json" "$name" "$round" "$which" >>"$md" <<'PY'
import json, sys
path, name, rnd, which = sys.argv[1:]
for c in json.load(open(path))["cases"]:
    print(f"| {name} | {rnd} | {which} | {c['name']} | {c['tokens_per_s']:.1f} | {c['ms_per_token']:.3f} |")
PY
    done
  done
done
cat "$md"
