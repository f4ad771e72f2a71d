#!/usr/bin/env bash
# Times scripts/quickstart.sh from a clean clone of this repository to the first 200 from
# /ready, with the compiler cache off (a first build on a new machine has none). Packages that
# are already installed are not installed again, so on a machine that has them this measures
# the model fetch, the configure and the build.
#
#   bench/quickstart/measure.sh [PORT]      (default port 18777; prints one line per stage)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
port=${1:-18777}
work=$(mktemp -d)
trap 'pkill -TERM -f "$work/clone/build/cpu/src/cli/llamaserve" 2>/dev/null || true; rm -rf "$work"' EXIT
git clone -q "$root" "$work/clone"
echo "measure: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), commit $(git -C "$root" rev-parse --short HEAD)"
start=$(date +%s.%N)
CCACHE_DISABLE=1 "$work/clone/scripts/quickstart.sh" --port "$port" >"$work/quickstart.log" 2>&1 &
pid=$!
until curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "measure: quickstart exited early:"; tail -20 "$work/quickstart.log"; exit 1
  fi
  sleep 0.5
done
end=$(date +%s.%N)
grep -E "^setup: " "$work/quickstart.log" | sed 's/^/measure: /'
echo "measure: serving after $(python3 -c "print(round($end - $start, 1))") s (load average now $(cut -d' ' -f1-3 /proc/loadavg))"
