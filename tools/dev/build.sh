#!/usr/bin/env bash
# Configures and builds ckpt into ${CKPT_BUILD_DIR:-build}. CUDA support is
# built when the toolkit is found (/usr/local/cuda); the GPU is detected at
# run time.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir="${CKPT_BUILD_DIR:-build}"
source tools/dev/ccache-launcher.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_BUILD_TESTS=ON \
  "${launcher[@]}" "$@" >/dev/null
# The build is warning-free with gcc 12 (Debian 12) and gcc 14 (Debian 13)
# and stays so: a warning fails it. Checked on the output rather than with
# -Werror, so that a user's newer compiler still builds; ccache replays a
# cached compile's warnings, so a fresh clone sees every one.
log="$build_dir/build.log"
set -o pipefail
ninja -C "$build_dir" -j"$(nproc)" 2>&1 | tee "$log"
if grep -q ': warning: ' "$log"; then
  grep ': warning: ' "$log" | sort -u >&2
  echo "build: the compiler warned (above; the whole output is in $log)" >&2
  exit 1
fi
