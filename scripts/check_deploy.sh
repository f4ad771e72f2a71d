#!/usr/bin/env bash
# Checks the Kubernetes manifests of deploy/k8s offline, and the Dockerfiles' structure:
#   1. kubectl kustomize renders every overlay (cpu, gpu, tp2, multihost)
#   2. yamllint (deploy/k8s/.yamllint) on the sources and on every rendered overlay
#   3. kubernetes-validate --strict against the Kubernetes $K8S_VERSION schemas (objects of
#      every kind but CRDs; an object without a schema fails unless it is a ServiceMonitor)
#   4. deploy/k8s/check_manifests.py: the ServiceMonitor against its own small schema, and
#      what no schema checks (references, probes, grace period vs drain, GPUs vs layout, the
#      server's flags and variables, the HPA metric vs metrics.cc and the adapter rule)
#   5. shellcheck of the launcher and the health check, when shellcheck is installed
#   6. the Dockerfiles: named stages, COPY sources present, runtime stage with USER (not
#      root), HEALTHCHECK, EXPOSE, STOPSIGNAL and exec-form ENTRYPOINT; and the build stages'
#      cmake configure run on only the files they COPY (cuda where nvcc is installed)
#      (scripts/check_dockerfile.py --configure)
# Needs kubectl (with built-in kustomize), python3 with yamllint, kubernetes-validate and
# PyYAML. Uses LLAMASERVE_BIN (default build/cpu/src/cli/llamaserve, if built) for the names
# of the flags and variables, else docs/configuration.md.
# Exit status 0 only when every check passed. K8S_DIR=DIR checks another copy of deploy/k8s;
# CHECK_DEPLOY_SKIP_CONFIGURE=1 leaves out the configures of step 6 (tests of the manifests).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
k8s_dir=${K8S_DIR:-deploy/k8s}
k8s_version=${K8S_VERSION:-1.32.0}
overlays=(cpu gpu tp2 multihost)
start=$SECONDS
failed=0
fail() {
  echo "check_deploy: FAILED: $*" >&2
  failed=$((failed + 1))
}

for tool in kubectl yamllint kubernetes-validate; do
  command -v "$tool" >/dev/null || {
    echo "check_deploy: $tool is not installed (kubectl: /usr/bin/kubectl; pip install yamllint kubernetes-validate)" >&2
    exit 2
  }
done
if [[ -z "${LLAMASERVE_BIN:-}" && -x build/cpu/src/cli/llamaserve ]]; then
  export LLAMASERVE_BIN=$root/build/cpu/src/cli/llamaserve
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== 1. render overlays with $(kubectl version --client 2>/dev/null | tr '\n' ' ')"
rendered=()
for overlay in "${overlays[@]}"; do
  if kubectl kustomize "$k8s_dir/overlays/$overlay" >"$out/$overlay.yaml" 2>"$out/$overlay.err"; then
    echo "  $overlay: $(grep -c '^kind:' "$out/$overlay.yaml") objects:" \
      "$(grep '^kind:' "$out/$overlay.yaml" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s ", $2, ($1 > 1 ? "x" $1 : "")}')"
    rendered+=("$overlay" "$out/$overlay.yaml")
  else
    cat "$out/$overlay.err" >&2
    fail "kubectl kustomize $k8s_dir/overlays/$overlay"
  fi
done

echo "== 2. yamllint ($k8s_dir/.yamllint): sources and rendered overlays"
if yamllint -f parsable -c "$k8s_dir/.yamllint" "$k8s_dir" "$out"/*.yaml; then
  echo "  $(find "$k8s_dir" -name '*.yaml' | wc -l) source files, ${#overlays[@]} rendered: clean"
else
  fail "yamllint"
fi

echo "== 3. kubernetes-validate --strict, Kubernetes $k8s_version"
for overlay in "${overlays[@]}"; do
  [[ -s "$out/$overlay.yaml" ]] || continue
  if ! kubernetes-validate --strict -k "$k8s_version" "$out/$overlay.yaml" >"$out/$overlay.kv" 2>&1; then
    cat "$out/$overlay.kv" >&2
    fail "kubernetes-validate $overlay"
    continue
  fi
  # A kind without a schema is only a warning there; here only the ServiceMonitor may lack one
  # (it is checked in step 4).
  if grep "Couldn't find schema" "$out/$overlay.kv" | grep -v 'kind ServiceMonitor with api version monitoring.coreos.com/v1' >&2; then
    fail "kubernetes-validate $overlay: objects without a schema"
  fi
  echo "  $overlay: $(grep -c ' passed for resource ' "$out/$overlay.kv") objects valid;" \
    "$(grep -c "Couldn't find schema" "$out/$overlay.kv") without schema (ServiceMonitor, step 4)"
done

echo "== 4. cross-object checks (deploy/k8s/check_manifests.py, names from ${LLAMASERVE_BIN:-docs/configuration.md})"
if ((${#rendered[@]})); then
  LLAMASERVE_ROOT=$root python3 "$k8s_dir/check_manifests.py" "${rendered[@]}" >"$out/checks.txt" || {
    grep -v '^  ok ' "$out/checks.txt" >&2
    fail "check_manifests.py"
  }
  tail -n 1 "$out/checks.txt" | sed 's/^/  /'
fi

echo "== 5. shellcheck"
if command -v shellcheck >/dev/null; then
  if shellcheck "$k8s_dir/overlays/multihost/tp-launch.sh" deploy/docker/healthcheck.sh \
    scripts/check_deploy.sh scripts/check_image.sh; then
    echo "  tp-launch.sh, healthcheck.sh, check_deploy.sh, check_image.sh: clean"
  else
    fail "shellcheck"
  fi
else
  echo "  skipped: shellcheck not installed"
fi

echo "== 6. Dockerfiles (structure; configure from the build context)"
configure=(--configure)
[[ "${CHECK_DEPLOY_SKIP_CONFIGURE:-0}" == 1 ]] && configure=() && echo "  (configures skipped)"
if python3 scripts/check_dockerfile.py "${configure[@]}" deploy/docker/Dockerfile deploy/docker/Dockerfile.cpu; then
  :
else
  fail "check_dockerfile.py"
fi

if ((failed)); then
  echo "check_deploy: $failed step(s) FAILED ($((SECONDS - start)) s)" >&2
  exit 1
fi
echo "check_deploy: all passed ($((SECONDS - start)) s)"
