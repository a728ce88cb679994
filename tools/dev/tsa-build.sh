#!/usr/bin/env bash
# A release-configured clang build of everything but the tests, into
# ${CKPT_TSA_BUILD_DIR:-build-tsa}, with clang's thread-safety analysis as
# errors: every ABSL_GUARDED_BY / EXCLUSIVE_LOCKS_REQUIRED is checked. Then
# checks that such a build (tests off) carries no fault injection: ckptd
# --help must not list --fault_kill_at.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir="${CKPT_TSA_BUILD_DIR:-build-tsa}"
source tools/dev/ccache-launcher.sh
source tools/dev/ninja-checked.sh
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCKPT_THREAD_SAFETY_ANALYSIS=ON -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_AGENT=OFF \
  -DCKPT_WITH_CUDA=OFF "${launcher[@]}" >/dev/null
ninja_checked "$build_dir"
if "$build_dir/daemon/ckptd" --helpfull 2>&1 | grep -q fault_kill_at; then
  echo "tsa-build: a build without tests still has --fault_kill_at" >&2
  exit 1
fi
echo "tsa-build: thread-safety analysis clean; no fault injection in the release configuration"
