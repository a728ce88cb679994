#!/usr/bin/env bash
# Configures and builds ckpt into ${CKPT_BUILD_DIR:-build}. CUDA support is
# built when the toolkit is found (/usr/local/cuda); the GPU is detected at
# run time.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir="${CKPT_BUILD_DIR:-build}"
launcher=()
if command -v ccache >/dev/null; then
  # Paths relative to the checkout, so worktrees and fresh clones share hits.
  export CCACHE_BASEDIR="$PWD"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_BUILD_TESTS=ON "${launcher[@]}" "$@" >/dev/null
ninja -C "$build_dir" -j"$(nproc)"
