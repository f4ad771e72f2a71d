#!/bin/bash
# Starts this pod's ranks of a tensor-parallel group that spans a StatefulSet
# (docs/multi-gpu.md, "Kubernetes"): with G GPUs per pod, pod p runs ranks p*G to p*G+G-1 on
# cuda:0 to cuda:G-1; rank 0 (pod 0, cuda:0) is `llamaserve serve`, every other rank a
# `llamaserve tp-worker` connecting to TP_COORDINATOR.
#
#   tp-launch.sh              start the ranks, exit when one of them ends
#   tp-launch.sh probe live   0 when every local rank runs (pod 0: and GET /health is 200)
#   tp-launch.sh probe ready  0 when every local rank runs (pod 0: and GET /ready is 200)
#
# Environment: POD_INDEX (else the host name's suffix), GPUS_PER_POD, LLAMASERVE_TP (the
# group size), TP_COORDINATOR (host:port of rank 0), LLAMASERVE_MODEL and the other
# LLAMASERVE_* variables, which both commands read.
#
# SIGTERM goes to the server, which drains and then shuts the group down; the workers ignore
# SIGTERM and exit 0 when rank 0 ends the group (or are killed at the end of the grace period).
set -uo pipefail

pod=${POD_INDEX:-${HOSTNAME##*-}}
gpus=${GPUS_PER_POD:?GPUS_PER_POD is not set}
tp=${LLAMASERVE_TP:?LLAMASERVE_TP is not set}
coordinator=${TP_COORDINATOR:?TP_COORDINATOR is not set}
config=${LLAMASERVE_LAUNCH_CONFIG:-/etc/llamaserve/config.json}
pids_file=/tmp/llamaserve-ranks.pids

http_ok() {  # http_ok PATH: 0 when GET PATH on the local server answers 200
  exec 3<>"/dev/tcp/127.0.0.1/${LLAMASERVE_PORT:-8080}" || return 1
  printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$1" >&3
  local status=""
  read -r -t 5 _ status _ <&3 || return 1
  [[ "$status" == 200 ]]
}

if [[ "${1:-}" == probe ]]; then
  [[ -s "$pids_file" ]] || exit 1
  while read -r pid; do
    kill -0 "$pid" 2>/dev/null || exit 1
  done <"$pids_file"
  if ((pod == 0)); then
    case "${2:-live}" in
      ready) http_ok /ready ;;
      *) http_ok /health ;;
    esac
    exit
  fi
  exit 0
fi

if ((pod < 0 || pod * gpus >= tp)); then
  echo "tp-launch: pod $pod holds no rank of a group of $tp with $gpus GPUs per pod" >&2
  exit 2
fi

: >"$pids_file.new"
server=""
# shellcheck disable=SC2317  # a trap handler
forward_term() {
  echo "tp-launch: SIGTERM"
  if [[ -n "$server" ]]; then kill -TERM "$server" 2>/dev/null; fi
}
trap forward_term TERM
pids=()
for ((g = 0; g < gpus; g++)); do
  rank=$((pod * gpus + g))
  ((rank < tp)) || break
  if ((rank == 0)); then
    llamaserve serve --config "$config" --tp "$tp" --tp-rank 0 --device cuda:0 &
    server=$!
  else
    (
      trap '' TERM
      exec llamaserve tp-worker --tp "$tp" --tp-rank "$rank" --tp-coordinator "$coordinator" \
        --device "cuda:$g"
    ) &
  fi
  pids+=($!)
  echo $! >>"$pids_file.new"
done
mv "$pids_file.new" "$pids_file"  # the probes see every rank or none
echo "tp-launch: pod $pod runs $(wc -l <"$pids_file") of the $tp ranks, from rank $((pod * gpus))"

# Wait for the first rank to end, looking once a second; a SIGTERM only interrupts the
# pause. Not `wait -n`: a rank that ended while the shell ran another command has left the
# job table, and `wait -n` would then wait for the next rank instead. `wait PID` still
# returns the status of a rank that ended earlier.
ended=""
while [[ -z "$ended" ]]; do
  for pid in "${pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      ended=$pid
      break
    fi
  done
  if [[ -z "$ended" ]]; then
    sleep 1 &
    wait $!
  fi
done
wait "$ended"
status=$?
echo "tp-launch: process $ended ended with status $status"

# The group cannot go on without a rank. After the server (it drained and shut the group
# down) the workers end by themselves. After a worker that failed, the group is broken: the
# other workers are killed and the server stopped (its passes fail from now on anyway).
workers=()
for pid in "${pids[@]}"; do
  [[ "$pid" != "$server" ]] && workers+=("$pid")
done
if [[ -n "$server" && "$ended" != "$server" ]]; then
  kill -TERM "$server" 2>/dev/null
  ((status == 0)) && status=1
fi
if ((status != 0 && ${#workers[@]})); then
  kill -KILL "${workers[@]}" 2>/dev/null
fi
for ((i = 0; i < 60; i++)); do
  [[ -n "$(jobs -pr)" ]] || break
  sleep 1
done
mapfile -t remaining < <(jobs -pr)
if ((${#remaining[@]})); then
  echo "tp-launch: killing ranks still running: ${remaining[*]}"
  kill -KILL "${remaining[@]}" 2>/dev/null
fi
wait
echo "tp-launch: exit $status"
exit "$status"
