#!/usr/bin/env bash
# Runs a command from a fresh clone of this checkout inside a Debian root of
# another release (default: trixie, Debian 13; bookworm is 12), so that the
# two commands can be checked on the release this machine is not. As root.
#
#   tools/dev/other-release.sh [--release NAME] [--root DIR] [COMMAND...]
#
# The root (default /var/tmp/ckpt-<release>) is made once with debootstrap
# from Debian's mirror and kept. The Python of the PATH (a pyenv or python.org
# build, as on the project's machines), pip's configuration, local wheel
# directories and the CUDA toolkit are bound in read-only where they exist,
# as they are on a machine of that release. The default command is the test
# command, `CI=true bash .ci/run`, with ccache empty (a cold build). The
# clone is at /ckpt inside the root; `tools/dev/other-release.sh bash` opens
# a shell there.
set -euo pipefail
cd "$(dirname "$0")/../.."
release=trixie
root=""
while [ $# -gt 0 ]; do
  case "$1" in
    --release) release="$2"; shift 2 ;;
    --root) root="$2"; shift 2 ;;
    *) break ;;
  esac
done
root="${root:-/var/tmp/ckpt-$release}"
[ "$(id -u)" -eq 0 ] || { echo "other-release: run as root (debootstrap, chroot, mounts)" >&2; exit 1; }
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
if [ ! -x "$root/usr/bin/apt-get" ]; then
  echo "other-release: debootstrap $release into $root"
  debootstrap --variant=minbase "$release" "$root" http://deb.debian.org/debian
fi

mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # SOURCE [read-only]: the same path inside the root
  [ -e "$1" ] || return 0
  mkdir -p "$root$1"
  mount --bind "$1" "$root$1"
  mounts+=("$root$1")
  [ "${2:-}" = ro ] && mount -o remount,bind,ro "$root$1"
  return 0
}
# The root as a mount point of its own: `ip netns exec` remounts / as a
# slave, which fails in a chroot whose / is a plain directory.
mount --bind "$root" "$root"
mounts+=("$root")
mount --make-private "$root"
bind /proc
bind /dev
bind /sys
# The interpreter itself, not a pyenv shim.
python="$(python3 -c 'import sys; print(sys.executable)')"
prefix="$("$python" -c 'import sys; print(sys.base_prefix)')"
case "$prefix" in /usr) ;; *) bind "$prefix" ro ;; esac
for dir in /opt/wheels /opt/pypi /opt/pypi-more /usr/local/cuda-*; do bind "$dir" ro; done
[ -e /usr/local/cuda ] && ln -sfn "$(readlink -f /usr/local/cuda)" "$root/usr/local/cuda"
# pip's configuration and the CA bundle it trusts, as this machine has them.
for f in /etc/pip.conf /etc/xdg/pip /root/.config/pip /etc/resolv.conf; do
  [ -e "$f" ] && mkdir -p "$root$(dirname "$f")" && cp -r "$f" "$root$(dirname "$f")/"
done
mkdir -p "$root/etc/ssl/certs"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/" 2>/dev/null || true

rm -rf "$root/ckpt"
git clone -q "$PWD" "$root/ckpt"
[ $# -gt 0 ] || set -- bash -c 'rm -rf /tmp/ccache-cold; CCACHE_DIR=/tmp/ccache-cold CI=true bash .ci/run </dev/null'
echo "other-release: Debian $(cat "$root/etc/debian_version"), a clone of $(git rev-parse --short HEAD) at /ckpt"
chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
  PATH="$(dirname "$python"):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  PIP_FIND_LINKS="${PIP_FIND_LINKS:-}" bash -c 'cd /ckpt && exec "$@"' bash "$@"
