#!/usr/bin/env bash
# Builds and runs the CPU container image (deploy/docker/Dockerfile.cpu) and checks what it
# promises: /health, /ready, a completion, the health check, a non-root user, and a clean
# drain and exit 0 on SIGTERM (`podman stop`).
#
#   scripts/check_image.sh [--mode full|prebuilt|host] [--model FILE] [--timeout SECONDS]
#
# Modes:
#   full      podman builds the whole Dockerfile.cpu (the build stage compiles llamaserve
#             from scratch: slow on 2 cores), then runs the image.
#   prebuilt  podman builds only the runtime stage of Dockerfile.cpu, taken from the file
#             itself, with `COPY --from=build /out/ /` fed from the already built
#             build/cpu/src/cli/llamaserve (same Debian 12 libraries); then runs the image.
#             The build stage is not exercised.
#   host      no container engine: runs the runtime stage's ENV, USER and ENTRYPOINT/CMD
#             outside a container (the binary of build/cpu as that user via setpriv, the
#             image's health check script), then SIGTERM. The image itself is not built.
#   auto      (default) prebuilt when podman works and build/cpu is built, else host.
#
# podman here: no registry is reachable, so the base image debian:bookworm-slim is made with
# debootstrap (minbase, from the Debian mirror apt uses) and imported, once (kept as
# localhost/debian:bookworm-slim; CHECK_IMAGE_REBUILD_BASE=1 makes it again). Storage is vfs
# and RUN steps use chroot isolation; containers run with --network host (the server listens
# on 127.0.0.1 only for the check) and the runc runtime when installed.
#
# Every step prints what it does and its time; any failure stops with "check_image: FAILED".
# The whole run is bounded by --timeout (default 900 s). Traffic goes to 127.0.0.1 only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

mode=auto
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
budget=900
while (($#)); do
  case "$1" in
    --mode) mode=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --timeout) budget=$2; shift 2 ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "check_image: unknown argument $1" >&2; exit 2 ;;
  esac
done

dockerfile=deploy/docker/Dockerfile.cpu
image=localhost/llamaserve:cpu-check
base=localhost/debian:bookworm-slim
container=llamaserve-check-$$
binary=${LLAMASERVE_BIN:-$root/build/cpu/src/cli/llamaserve}
uid=10001
start_all=$SECONDS
scratch=$(mktemp -d /var/tmp/check-image.XXXXXX)
server_pid=""

die() {
  echo "check_image: FAILED: $*" >&2
  exit 1
}
step() { echo "== $* ($((SECONDS - start_all)) s)"; }
left() {  # seconds left of the budget, at least 1
  local l=$((budget - (SECONDS - start_all)))
  ((l > 0)) || die "over the ${budget} s budget"
  echo "$l"
}
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid" || true; fi
  if command -v podman >/dev/null && podman container exists "$container" 2>/dev/null; then
    echo "-- podman logs $container (last 20 lines)"
    podman logs "$container" 2>&1 | tail -n 20 || true
    podman rm -f "$container" >/dev/null 2>&1 || true
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'echo "check_image: FAILED: line $LINENO: $BASH_COMMAND (status $?)" >&2' ERR

[[ -f "$model" ]] || die "no model $model (scripts/fetch_model.sh fetches it)"
command -v curl >/dev/null || die "curl is needed on this machine"

podman_works() {
  command -v podman >/dev/null && podman info >/dev/null 2>&1
}
if [[ "$mode" == auto ]]; then
  if podman_works && [[ -x "$binary" ]]; then mode=prebuilt; else mode=host; fi
fi
echo "check_image: mode $mode, model $model, budget $budget s"

step "structure of both Dockerfiles"
python3 scripts/check_dockerfile.py deploy/docker/Dockerfile "$dockerfile" || die "Dockerfile structure"

# The runtime stage's settings, read from the Dockerfile (they are what the image runs).
runtime_stage() {  # the lines of the last stage, continuation lines joined
  awk '/^FROM /{buf=""} {buf = buf $0 "\n"} END{printf "%s", buf}' "$dockerfile" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta'
}
image_env=$(runtime_stage | sed -n 's/^ENV //p' | tr -s ' ' '\n' | grep '=' || true)
entry=$(runtime_stage | sed -n 's/^ENTRYPOINT //p')
cmd=$(runtime_stage | sed -n 's/^CMD //p')
user=$(runtime_stage | sed -n 's/^USER //p')
[[ "$user" == "$uid:$uid" ]] || die "runtime stage USER is '$user', expected $uid:$uid"
echo "  ENV: $(echo "$image_env" | tr '\n' ' ')"
echo "  USER $user; ENTRYPOINT $entry; CMD $cmd"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
log=$scratch/server.log

wait_http() {  # wait_http PATH SECONDS: until GET PATH answers 200
  local path=$1 limit=$2 i
  for ((i = 0; i < limit * 4; i++)); do
    if curl -fsS -o /dev/null --max-time 2 "$url$path" 2>/dev/null; then return 0; fi
    if [[ -n "$server_pid" ]] && ! kill -0 "$server_pid" 2>/dev/null; then return 1; fi
    if [[ "$mode" != host ]] && [[ "$(podman inspect -f '{{.State.Running}}' "$container" 2>/dev/null)" != true ]]; then
      return 1
    fi
    sleep 0.25
  done
  return 1
}

exercise() {  # /health, /ready, a completion
  local t=$SECONDS
  wait_http /health 60 || die "/health did not answer 200 within 60 s"
  echo "  /health 200 after $((SECONDS - t)) s"
  wait_http /ready 180 || die "/ready did not answer 200 within 180 s"
  echo "  /ready 200 after $((SECONDS - t)) s"
  local body
  body=$(curl -fsS --max-time 60 "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}') ||
    die "POST /v1/completions failed"
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); t=d["choices"][0]["text"]; assert d["usage"]["completion_tokens"] > 0, d; print("  completion:", repr(t))' "$body" ||
    die "unexpected completion: $body"
}

stream_out=$scratch/stream.txt
stream_pid=""
start_stream() {  # a streamed completion, running when this returns
  curl -sS -N --max-time 120 "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 160, "temperature": 0, "stream": true}' \
    >"$stream_out" 2>&1 &
  stream_pid=$!
  local i
  for ((i = 0; i < 200; i++)); do
    grep -q '^data: {' "$stream_out" 2>/dev/null && return 0
    sleep 0.05
  done
  die "the stream sent nothing within 10 s"
}
check_drained() {  # the log says it drained; the stream in flight finished whole
  grep -q 'SIGTERM received; draining' "$log" || die "the log does not say it drained"
  grep -q 'serve: shut down' "$log" || die "the log does not say it shut down"
  wait "$stream_pid" || die "the stream in flight failed: $(tail -c 300 "$stream_out")"
  if ! grep -q '"finish_reason":"length"' "$stream_out" || ! grep -q '^data: \[DONE\]' "$stream_out"; then
    die "the stream in flight did not finish: $(tail -c 300 "$stream_out")"
  fi
  echo "  the stream in flight finished ($(grep -c '^data: {' "$stream_out") events, [DONE])"
}

if [[ "$mode" == host ]]; then
  step "host mode: the runtime stage's ENV/USER/ENTRYPOINT outside a container (image not built)"
  [[ -x "$binary" ]] || die "no $binary (build the cpu preset first)"
  command -v setpriv >/dev/null || die "setpriv (util-linux) is needed"
  # As in the image: the binary under /usr/local/bin, the vocabularies beside it, /models.
  mkdir -p "$scratch/usr/local/bin" "$scratch/usr/local/share/llamaserve" "$scratch/models"
  cp "$binary" "$scratch/usr/local/bin/llamaserve"
  cp tests/fixtures/vocab-llama2-spm.gguf tests/fixtures/vocab-llama3-bpe.gguf "$scratch/usr/local/share/llamaserve/"
  cp deploy/docker/healthcheck.sh "$scratch/usr/local/bin/llamaserve-healthcheck"
  ln -s "$model" "$scratch/models/$(basename "$model")"
  chmod -R a+rX "$scratch" "$model"
  mapfile -t argv < <(python3 -c 'import json,sys; a=json.loads(sys.argv[1])+json.loads(sys.argv[2]); print("\n".join(a))' "$entry" "$cmd")
  # tini when installed here; otherwise the server itself is the process that gets SIGTERM.
  [[ -x "${argv[0]}" ]] || argv=("${argv[@]:2}")
  argv=("${argv[@]/#\/usr\/local\/bin\/llamaserve/$scratch/usr/local/bin/llamaserve}")
  mapfile -t envs < <(echo "$image_env")
  echo "  running as uid $uid: ${argv[*]}"
  (cd "$scratch/models" && exec env -i PATH=/usr/bin:/bin "${envs[@]}" LLAMASERVE_HOST=127.0.0.1 \
    LLAMASERVE_PORT="$port" LLAMASERVE_MODEL="$scratch/models/$(basename "$model")" \
    setpriv --reuid "$uid" --regid "$uid" --clear-groups "${argv[@]}") >"$log" 2>&1 &
  server_pid=$!
  step "probes and a completion"
  exercise
  running_uid=$(ps -o uid= -p "$(pgrep -P "$server_pid" -f llamaserve || echo "$server_pid")" | tr -d ' ')
  [[ "$running_uid" == "$uid" ]] || die "server runs as uid $running_uid"
  echo "  server runs as uid $running_uid"
  LLAMASERVE_PORT=$port bash "$scratch/usr/local/bin/llamaserve-healthcheck" || die "health check script"
  echo "  health check script: healthy"
  step "SIGTERM with a stream in flight"
  start_stream
  kill -TERM "$server_pid"
  status=0
  for ((i = 0; i < 240; i++)); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$server_pid" 2>/dev/null && die "still running 60 s after SIGTERM"
  wait "$server_pid" || status=$?
  server_pid=""
  tail -n 3 "$log" | sed 's/^/  log: /'
  ((status == 0)) || die "exit status $status after SIGTERM"
  check_drained
  echo "  exit status 0, drained"
  echo "check_image: passed (mode host: image not built; $((SECONDS - start_all)) s)"
  exit 0
fi

# ---- podman ----
podman_works || die "podman is not installed or does not work here (apt-get install podman buildah debootstrap; or --mode host)"
runtime_args=()
command -v runc >/dev/null && runtime_args=(--runtime runc)
# The default ulimits of podman are above what this machine lets a process set.
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=4096:4096")
build_args=(--isolation chroot --network host --format docker "${limits[@]}"
  --build-arg "DEBIAN_IMAGE=$base")

if [[ "${CHECK_IMAGE_REBUILD_BASE:-0}" == 1 ]] || ! podman image exists "$base"; then
  step "base image $base with debootstrap"
  command -v debootstrap >/dev/null || die "debootstrap is not installed"
  # The first Debian (not security) URI of apt's sources, deb822 or one-line format.
  mirror=$( (cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true) |
    sed -nE 's/^URIs:[[:space:]]*(\S+).*/\1/p; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?(\S+).*/\2/p' |
    grep -v security | head -n 1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  t=$SECONDS
  timeout "$(left)" debootstrap --variant=minbase bookworm "$scratch/rootfs" "$mirror" >"$scratch/debootstrap.log" 2>&1 ||
    { tail -n 20 "$scratch/debootstrap.log" >&2; die "debootstrap from $mirror"; }
  rm -rf "$scratch/rootfs/var/cache/apt/archives"/*.deb "$scratch/rootfs/var/lib/apt/lists"/*
  tar -C "$scratch/rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null ||
    die "podman import"
  rm -rf "$scratch/rootfs"
  echo "  debootstrap from $mirror and import: $((SECONDS - t)) s"
else
  echo "== base image $base present ($(podman image inspect -f '{{.Size}}' "$base") bytes)"
fi

t=$SECONDS
if [[ "$mode" == full ]]; then
  step "podman build -f $dockerfile (both stages)"
  timeout "$(left)" podman build "${build_args[@]}" -f "$dockerfile" -t "$image" . >"$scratch/build.log" 2>&1 ||
    { tail -n 30 "$scratch/build.log" >&2; die "podman build"; }
else
  [[ -x "$binary" ]] || die "no $binary (build the cpu preset first, or --mode full)"
  step "podman build of $dockerfile's runtime stage, with the binary of build/cpu"
  ctx=$scratch/context
  mkdir -p "$ctx/out/usr/local/bin" "$ctx/out/usr/local/share/llamaserve" "$ctx/deploy/docker"
  strip -o "$ctx/out/usr/local/bin/llamaserve" "$binary"
  cp tests/fixtures/vocab-llama2-spm.gguf tests/fixtures/vocab-llama3-bpe.gguf "$ctx/out/usr/local/share/llamaserve/"
  cp deploy/docker/healthcheck.sh "$ctx/deploy/docker/"
  # The ARGs before the first FROM, then the runtime stage as written, fed from out/.
  { sed -n '/^FROM /q; /^ARG /p' "$dockerfile"
    sed -n '/^FROM .* AS runtime$/,$p' "$dockerfile" | sed 's#^COPY --from=build /out/ /$#COPY out/ /#'
  } >"$ctx/Containerfile"
  grep -q '^COPY out/ /$' "$ctx/Containerfile" || die "the runtime stage no longer has COPY --from=build /out/ /"
  timeout "$(left)" podman build "${build_args[@]}" -f "$ctx/Containerfile" -t "$image" "$ctx" >"$scratch/build.log" 2>&1 ||
    { tail -n 30 "$scratch/build.log" >&2; die "podman build"; }
fi
echo "  built $image in $((SECONDS - t)) s ($(podman image inspect -f '{{.Size}}' "$image") bytes)"
[[ "$(podman image inspect -f '{{.Config.User}}' "$image")" == "$uid:$uid" ]] || die "image USER"
healthcheck=$(podman image inspect -f '{{.Config.Healthcheck}}' "$image")
[[ "$healthcheck" == *llamaserve-healthcheck* ]] || die "image has no HEALTHCHECK: $healthcheck"

step "podman run (model mounted read-only on /models; read-only root, no capabilities, as deploy/k8s runs it)"
podman run -d --name "$container" "${runtime_args[@]}" "${limits[@]}" --network host \
  --read-only --cap-drop ALL --security-opt no-new-privileges \
  -v "$model:/models/$(basename "$model"):ro" \
  -e LLAMASERVE_HOST=127.0.0.1 -e LLAMASERVE_PORT="$port" \
  -e LLAMASERVE_MODEL="/models/$(basename "$model")" "$image" >/dev/null 2>"$scratch/run.err" ||
  { cat "$scratch/run.err" >&2; die "podman run"; }
exercise
running_uid=$(podman exec "$container" id -u) || die "podman exec"
[[ "$running_uid" == "$uid" ]] || die "container runs as uid $running_uid"
echo "  runs as uid $running_uid ($(podman top "$container" user comm 2>/dev/null | tail -n +2 | tr -s ' ' | tr '\n' ';'))"
health=$(podman healthcheck run "$container" 2>&1) || die "podman healthcheck run: $health"
[[ "$(podman inspect -f '{{.State.Health.Status}}' "$container" 2>/dev/null)" == healthy ]] ||
  die "health status $(podman inspect -f '{{.State.Health.Status}}' "$container" 2>/dev/null)"
echo "  HEALTHCHECK: healthy"

step "podman stop (SIGTERM) with a stream in flight"
start_stream
t=$SECONDS
podman stop -t 60 "$container" >/dev/null 2>"$scratch/stop.err" || { cat "$scratch/stop.err" >&2; die "podman stop"; }
status=$(podman inspect -f '{{.State.ExitCode}}' "$container")
podman logs "$container" >"$log" 2>&1
tail -n 3 "$log" | sed 's/^/  log: /'
[[ "$status" == 0 ]] || die "exit code $status after SIGTERM"
check_drained
echo "  stopped in $((SECONDS - t)) s, exit code 0, drained"
podman rm "$container" >/dev/null

# The image as the cpu overlay's Deployment runs it: its args and its config.json.
overlay_config=deploy/k8s/overlays/cpu/config.json
mapfile -t pod_args < <(python3 -c 'import sys,yaml; d=yaml.safe_load(open(sys.argv[1])); print("\n".join(d["spec"]["template"]["spec"]["containers"][0]["args"]))' deploy/k8s/base/deployment.yaml)
step "podman run ${pod_args[*]} with $overlay_config on /etc/llamaserve (the cpu overlay)"
podman run -d --name "$container" "${runtime_args[@]}" "${limits[@]}" --network host \
  --read-only --cap-drop ALL --security-opt no-new-privileges \
  -v "$model:/models/$(basename "$model"):ro" -v "$root/$overlay_config:/etc/llamaserve/config.json:ro" \
  -e LLAMASERVE_HOST=127.0.0.1 -e LLAMASERVE_PORT="$port" "$image" "${pod_args[@]}" >/dev/null 2>"$scratch/run.err" ||
  { cat "$scratch/run.err" >&2; die "podman run"; }
wait_http /ready 180 || die "/ready did not answer 200 within 180 s with $overlay_config"
models=$(curl -fsS --max-time 5 "$url/v1/models") || die "GET /v1/models"
for name in $(python3 -c 'import json,sys; print(" ".join(m["name"] for m in json.load(open(sys.argv[1]))["models"]))' "$overlay_config"); do
  grep -q "\"id\":\"$name\"" <<<"$models" || die "model $name of $overlay_config not served: $models"
  echo "  serves $name"
done
metrics=$(curl -fsS --max-time 5 "$url/metrics") || die "GET /metrics"
grep -q '^llamaserve_queue_length ' <<<"$metrics" || die "/metrics has no llamaserve_queue_length (the HPA's metric)"
echo "  /metrics has llamaserve_queue_length (the HPA's metric)"
podman stop -t 60 "$container" >/dev/null 2>&1 || die "podman stop"
status=$(podman inspect -f '{{.State.ExitCode}}' "$container")
[[ "$status" == 0 ]] || die "exit code $status after SIGTERM"
podman rm "$container" >/dev/null
echo "  stopped, exit code 0"
echo "check_image: passed (mode $mode; $((SECONDS - start_all)) s)"
