#!/usr/bin/env bash
# Installs what ckpt builds and tests with, from Debian's packages only.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev liburing-dev libisal-dev catch2 libcli11-dev
  libssl-dev clang libclang-rt-14-dev fio openssl iproute2
  libsystemd-dev prometheus-cpp-dev prometheus clang-format
  python3-dev pybind11-dev python3-pytest python3-torch
  dpkg-dev file  # cpack -G DEB: dpkg-shlibdeps, and file to find the binaries
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
