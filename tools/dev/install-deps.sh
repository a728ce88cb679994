#!/usr/bin/env bash
# Installs what ckpt builds and tests with: Debian's packages for the C++
# side and the servers the tests start, and one Python environment at .venv/
# from requirements.txt (PyPI). Works on Debian 12 and 13: where a package's
# name differs between the two (clang's runtime follows clang's version), the
# name that exists on the running release is chosen, and a package that
# exists under no known name stops the script, naming it.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Package names that are the same on Debian 12 and 13.
packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev liburing-dev libisal-dev catch2 libcli11-dev pybind11-dev
  libssl-dev libsystemd-dev prometheus-cpp-dev libzstd-dev libcurl4-openssl-dev
  clang fio openssl ca-certificates iproute2 procps prometheus
  dpkg-dev file  # cpack -G DEB: dpkg-shlibdeps, and file to find the binaries
  xz-utils binutils  # tools/dev/gpu-check.sh: the bundle is stripped and xz-compressed
  # The S3 server of the tests and benchmarks (tools/dev/s3-server.sh):
  # Swift with its s3api middleware.
  swift swift-proxy swift-account swift-container swift-object memcached curl
  # Coordinators elect their leader through etcd (docs/failover.md): the
  # server the tests start, etcdctl, and the protos the stubs come from.
  etcd-server etcd-client golang-etcd-server-dev
)

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
release="$(cat /etc/debian_version 2>/dev/null || echo unknown)"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
apt_updated=0
apt_update() {
  [ "$apt_updated" -eq 1 ] && return
  $sudo apt-get update -qq
  apt_updated=1
}
# Whether the package lists know a package (after apt-get update).
known() { [ -n "$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)"')" ]; }

# clang's sanitizer and fuzzer runtime is versioned with clang: 14 on
# Debian 12, 19 on 13. Read the version of Debian's default clang.
clang_major() {
  local v=""
  if installed clang; then
    v="$(dpkg-query -W -f='${Depends}' clang | grep -o 'clang-[0-9]\+' | head -1)"
  else
    apt_update
    v="$(apt-cache depends clang 2>/dev/null | grep -o 'clang-[0-9]\+' | head -1)"
  fi
  echo "${v#clang-}"
}
major="$(clang_major)"
if [ -z "$major" ]; then
  echo "install-deps: cannot tell which clang Debian $release ships (apt-cache depends clang)" >&2
  exit 1
fi
packages+=("libclang-rt-$major-dev")

# The Python of the PATH builds .venv; a Debian python3 needs its venv module
# and headers as packages (a pyenv or python.org build carries both).
python="$(command -v python3 || true)"
if [ -z "$python" ]; then
  packages+=(python3 python3-venv python3-dev)
elif [ "$(readlink -f "$python")" = "$(readlink -f /usr/bin/python3 2>/dev/null || true)" ]; then
  packages+=(python3-venv python3-dev)
fi

# awscli: one of the baselines of ckpt-bench --s3 (boto3 is the other, from
# requirements.txt); taken where the release has it, skipped by the bench
# where not.
apt_update_if_unknown() { known "$1" || apt_update; }
if ! installed awscli; then
  apt_update_if_unknown awscli
  if known awscli; then packages+=(awscli); fi
fi

missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt_update
  unknown=()
  for p in "${missing[@]}"; do known "$p" || unknown+=("$p"); done
  if [ ${#unknown[@]} -gt 0 ]; then
    echo "install-deps: Debian $release has no package named: ${unknown[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#packages[@]} Debian packages present (Debian $release, clang $major)"
fi

# The Python environment: torch (CPU), pytest, safetensors, transformers and
# the pinned clang-format, at .venv/ (ignored by git). Reinstalled only when
# requirements.txt changes.
python="$(command -v python3)"
stamp=.venv/.requirements.sha256
want="$(sha256sum requirements.txt | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-deps: creating .venv from requirements.txt with $("$python" --version)"
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" >"$stamp"
else
  echo "install-deps: .venv matches requirements.txt"
fi
