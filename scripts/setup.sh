#!/usr/bin/env bash
# Installs what llamaserve needs on a fresh Debian 12 machine, fetches the default model, and
# configures and builds the cpu preset. Safe to run again: each step is idempotent.
#
#   scripts/setup.sh            everything the tests need (compilers, -dev packages, Java,
#                               Python test tools, browser, promtool, podman), and the whole
#                               cpu build
#   scripts/setup.sh --serve    only what serving needs: the build packages of the server and
#                               the `llamaserve` program (no tests, tools or Java)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mode=all
[[ "${1:-}" == "--serve" ]] && mode=serve

step_start=$SECONDS
step() { echo "setup: $* (at $((SECONDS - step_start)) s)"; }

serve_packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates python3 python3-pip
  libboost1.81-dev zlib1g-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev
  prometheus-cpp-dev
)
test_packages=(
  ccache clang-format clang-14 libclang-rt-14-dev
  libcpp-httplib-dev libgtest-dev libgmock-dev googletest libbenchmark-dev libsentencepiece-dev
  default-jdk-headless maven maven-debian-helper junit5 libsurefire-java
  libmaven-compiler-plugin-java libmaven-resources-plugin-java libmaven-jar-plugin-java
  libmaven-clean-plugin-java
  prometheus gnuplot-nox chromium chromium-driver curl shellcheck podman runc debootstrap
)
apt_packages=("${serve_packages[@]}")
[[ $mode == all ]] && apt_packages+=("${test_packages[@]}")
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  step "installing ${#missing[@]} Debian packages: ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if [[ $mode == all ]]; then
  step "installing the Python test tools"
  python3 -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
fi

step "fetching the default model"
scripts/fetch_model.sh

# Ninja's progress line: finished/total edges and seconds so far.
export NINJA_STATUS="[%f/%t %es] "
if [[ $mode == serve ]]; then
  # One compiler run per batch of a folder's sources (a unity build): the headers that every
  # file of a folder includes are parsed once per batch instead of once per file.
  step "configuring (tests off, unity build) and building llamaserve"
  cmake --preset cpu -DLLAMASERVE_TESTS=OFF -DCMAKE_UNITY_BUILD=ON >/dev/null
  cmake --build --preset cpu -j "$(nproc)" --target llamaserve
else
  step "configuring and building the cpu preset"
  # Undoes what a --serve run set (tests come from the preset).
  cmake --preset cpu -DCMAKE_UNITY_BUILD=OFF >/dev/null
  cmake --build --preset cpu -j "$(nproc)"
fi
step "done"
