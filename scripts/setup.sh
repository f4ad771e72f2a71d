#!/usr/bin/env bash
# Installs everything llamaserve needs to build and test on a fresh Debian 12 machine
# (compilers, -dev packages, Python test tools), fetches the default model, and configures
# and builds the cpu preset. Safe to run again: each step is idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

apt_packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates ccache clang-format
  clang-14 libclang-rt-14-dev
  libboost1.81-dev zlib1g-dev libcpp-httplib-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev
  prometheus-cpp-dev libgtest-dev libgmock-dev googletest libbenchmark-dev
  libsentencepiece-dev
  default-jdk-headless maven maven-debian-helper junit5 libsurefire-java
  libmaven-compiler-plugin-java libmaven-resources-plugin-java libmaven-jar-plugin-java
  libmaven-clean-plugin-java
)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

python3 -m pip install --quiet --disable-pip-version-check -r requirements-test.txt

scripts/fetch_model.sh

cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$(nproc)"
