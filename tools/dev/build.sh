#!/usr/bin/env bash
# Configures and builds ckpt into ${CKPT_BUILD_DIR:-build}. CUDA support is
# built when the toolkit is found (/usr/local/cuda); the GPU is detected at
# run time.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir="${CKPT_BUILD_DIR:-build}"
source tools/dev/ccache-launcher.sh
source tools/dev/ninja-checked.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_BUILD_TESTS=ON \
  "${launcher[@]}" "$@" >/dev/null
ninja_checked "$build_dir"
