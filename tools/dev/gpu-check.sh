#!/usr/bin/env bash
# The GPU truth in one call. Here (any machine with this build):
#
#   tools/dev/gpu-check.sh            build the bundle, print the device call,
#                                     then run the bundle here as the device would
#   tools/dev/gpu-check.sh --bundle   build the bundle and print the call only
#
# On the lent GPU machine (the `device` tool's run, with the working tree and
# the bundle carried):
#
#   tools/dev/gpu-check.sh --run gpu-bundle/bundle.tar.xz
#
# The bundle (gpu-bundle/bundle.tar.xz, ignored by git, under the 64 MiB
# carry limit) holds stripped ckptd, ckptctl and ckpt-bench, the [gpu] test
# binaries, the shared libraries they need that a bare machine lacks (gRPC,
# protobuf, abseil, ...; never glibc, libstdc++ or the driver), and what it
# takes to build the agent's module for whatever Python the machine has (its
# static libraries and abseil's headers), since the agent's CUDA tests run
# under that machine's torch. The run prints a table last; full logs go
# under $OUT (or ${CKPT_GPU_CHECK_OUT:-/tmp/gpu-check}). Each part has its
# own time limit, and the whole stays inside 8 minutes. Without a GPU every
# GPU part reports skipped. Exit code: 0 when nothing failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

bundle_file=gpu-bundle/bundle.tar.xz
build_dir="${CKPT_BUILD_DIR:-build}"

# Everything a program links that is not glibc, the C++ runtime (the target's
# own, newer, must serve torch in the same process) or the GPU driver.
bundled_lib() {
  case "$(basename "$1")" in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libresolv.so* | \
      libutil.so* | libstdc++.so* | libgcc_s.so* | libcuda.so* | libnvidia* | linux-vdso*) return 1 ;;
  esac
  return 0
}

make_bundle() {
  set -e
  if [[ ! -f "$build_dir/build.ninja" ]]; then
    tools/dev/build.sh
  fi
  local targets=(ckptd ckptctl ckpt-bench cuda_runtime_test gpu_checkpoint_test _ckpt)
  ninja -C "$build_dir" "${targets[@]}" >/dev/null
  local stage
  stage=$(mktemp -d /tmp/ckpt-gpu-stage.XXXXXX)
  mkdir -p "$stage"/{bin,tests,lib,static,include,agent}
  local programs=("$build_dir/daemon/ckptd" "$build_dir/tools/ckptctl/ckptctl"
                  "$build_dir/tools/bench/ckpt-bench")
  local tests=("$build_dir/tests/gpu/cuda_runtime_test" "$build_dir/tests/gpu/gpu_checkpoint_test")
  local module
  module=$(ls "$build_dir"/agent/python/ckpt/_ckpt.*.so)
  for p in "${programs[@]}"; do strip -o "$stage/bin/$(basename "$p")" "$p"; done
  for t in "${tests[@]}"; do strip -o "$stage/tests/$(basename "$t")" "$t"; done
  strip -o "$stage/agent/$(basename "$module")" "$module"
  # Each shared library once, under its soname (what the loader looks for).
  ldd "${programs[@]}" "${tests[@]}" "$module" | awk '/=> \//{print $3}' | sort -u |
    while read -r lib; do
      if bundled_lib "$lib"; then cp -L "$lib" "$stage/lib/$(basename "$lib")"; fi
    done
  strip --strip-unneeded "$stage"/lib/*
  # The agent module's own parts, to link it there against that Python: the
  # static libraries on its link line, in that order, and abseil's headers
  # (client.h includes them; they must match the bundled abseil).
  local link_line
  link_line=$(sed -n "/^build agent\/python\/ckpt\/_ckpt/,/LINK_LIBRARIES/p" "$build_dir/build.ninja" |
              grep LINK_LIBRARIES)
  local order=()
  for a in $(grep -o '[^ ]*\.a' <<<"$link_line"); do
    [[ "$a" = /* ]] || a="$build_dir/$a"
    local name
    name=$(basename "$a")
    if [[ ! -f "$stage/static/$name" ]]; then
      strip --strip-debug -o "$stage/static/$name" "$a"
      order+=("$name")
    fi
  done
  printf '%s\n' "${order[@]}" >"$stage/static/ORDER"
  cp -r /usr/include/absl "$stage/include/"
  mkdir -p gpu-bundle
  tar -C "$stage" -cf - . | xz -T0 -6 >"$bundle_file.tmp"
  mv "$bundle_file.tmp" "$bundle_file"
  rm -rf "$stage"
  local size
  size=$(stat -c %s "$bundle_file")
  local tree
  tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
  echo "gpu-check: $bundle_file: $((size >> 20)) MiB; with the working tree" \
    "$(((size + tree) >> 20)) MiB of the 64 MiB carry limit"
  if ((size + tree > 60 << 20)); then
    echo "gpu-check: the bundle is too large to carry" >&2
    exit 1
  fi
  cat <<EOF
gpu-check: the device call (the device tool's run):
  command:   tools/dev/gpu-check.sh --run $bundle_file
  carry:     ["gpu-bundle"]
  timeout_s: 450
EOF
  set +e
}

# ---------------------------------------------------------------- the run

out="${OUT:-${CKPT_GPU_CHECK_OUT:-/tmp/gpu-check}}"
declare -a table=()
failed=0

row() {  # part result detail
  table+=("$(printf '%-26s %-8s %s' "$1" "$2" "$3")")
  [[ "$2" == FAILED ]] && failed=1
  echo "gpu-check: $1: $2 $3"
}

# Runs a Catch2 binary; 0 passed, 77 every case skipped (tests/catch_skip.h).
run_catch() {
  local name=$1
  local log="$out/$name.log"
  timeout 100 "$unpacked/tests/$name" --durations yes >"$log" 2>&1
  local rc=$?
  local summary
  summary=$(grep -E "test cases|All tests passed" "$log" | tail -1)
  case $rc in
    0) row "$name" passed "$summary" ;;
    77) row "$name" skipped "$(grep -m1 -o 'skipped: .*' "$log" | cut -c1-90)" ;;
    124) row "$name" FAILED "timed out after 100 s" ;;
    *) row "$name" FAILED "exit $rc: $summary" ;;
  esac
}

# The agent's module for this Python: the bundled one when it matches, else
# built here from binding.cc and the bundled static libraries.
agent_module() {
  local dest=$1 py=$2
  local suffix
  suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))') || return 1
  mkdir -p "$dest/ckpt"
  cp "$repo"/agent/ckpt/*.py "$dest/ckpt/"
  # CKPT_GPU_CHECK_BUILD_MODULE=1 builds it even so (to try that path here).
  if [[ -f "$unpacked/agent/_ckpt$suffix" && -z "${CKPT_GPU_CHECK_BUILD_MODULE:-}" ]]; then
    cp "$unpacked/agent/_ckpt$suffix" "$dest/ckpt/"
    return 0
  fi
  local include
  # pip's pybind11 where that Python has it, else Debian's headers.
  include=$("$py" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null) ||
    include=/usr/include
  [[ -f "$include/pybind11/pybind11.h" ]] || { echo "no pybind11 headers for $py"; return 1; }
  local python_include
  python_include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  [[ -f "$python_include/Python.h" ]] || { echo "no Python.h under $python_include"; return 1; }
  command -v g++ >/dev/null || { echo "no g++"; return 1; }
  local statics=()
  while read -r a; do statics+=("$unpacked/static/$a"); done <"$unpacked/static/ORDER"
  # DT_RPATH, not RUNPATH: it serves the bundled libraries' own needs too.
  g++ -O1 -std=c++20 -shared -fPIC -fvisibility=hidden "$repo/agent/src/binding.cc" \
    -I"$repo" -I"$repo/client/include" -I"$unpacked/include" -I"$include" -I"$python_include" \
    -Wl,--start-group "${statics[@]}" -Wl,--end-group "$unpacked"/lib/*.so* \
    -ldl -lrt -latomic -Wl,--disable-new-dtags,-rpath,"$unpacked/lib" -o "$dest/ckpt/_ckpt$suffix" || return 1
  # Every symbol resolved now, not at a test's first call of it.
  (cd /tmp && PYTHONPATH="$dest" LD_BIND_NOW=1 "$py" -c 'import ckpt._ckpt')
}

run_agent() {
  local py="${CKPT_PYTHON:-python3}"
  local log="$out/agent_cuda.log"
  if ! "$py" -c 'import torch' >/dev/null 2>&1; then
    row agent_cuda_tensors skipped "no torch for $py"
    return
  fi
  local site="$work/site"
  if ! agent_module "$site" "$py" >"$out/agent_build.log" 2>&1; then
    row agent_cuda_tensors FAILED "module build: $(tail -1 "$out/agent_build.log" | cut -c1-80)"
    return
  fi
  # The daemon it starts needs the bundled libraries; Python must not get
  # them (torch's own, newer ones would be shadowed).
  for p in ckptd ckptctl; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$unpacked/lib" "$unpacked/bin/$p" \
      >"$work/$p"
    chmod +x "$work/$p"
  done
  (cd /tmp && PYTHONPATH="$site" CKPTD="$work/ckptd" CKPTCTL="$work/ckptctl" \
    PYTHONUNBUFFERED=1 timeout 120 "$py" -m pytest -v -p no:cacheprovider -o faulthandler_timeout=100 \
    "$repo/agent/tests/test_cuda_tensors.py" >"$log" 2>&1)
  local rc=$?
  local summary
  summary=$(grep -E "passed|failed|skipped|error" "$log" | tail -1 | tr -d '=' | sed 's/^ *//')
  if [[ $rc -ne 0 ]]; then
    row agent_cuda_tensors FAILED "exit $rc: $summary"
  elif grep -q " passed" <<<"$summary"; then
    row agent_cuda_tensors passed "$summary (torch $("$py" -c 'import torch; print(torch.__version__)'))"
  else
    row agent_cuda_tensors skipped "$summary"
  fi
}

run_bench() {
  local log="$out/ckpt-bench-gpu.log"
  mkdir -p "$work/bench"
  # Four ranks share the GPU; ckptd gets the reader threads a GPU host's
  # service would (memory-tier loads to a GPU are copies, not disk waits).
  timeout 150 "$unpacked/bin/ckpt-bench" --gpu --json --dir "$work/bench" \
    --ckptd "$unpacked/bin/ckptd" --state-gib "${CKPT_GPU_STATE_GIB:-8}" --ranks 4 \
    --reader-threads 8 \
    >"$out/ckpt-bench-gpu.json.log" 2>"$log"
  local rc=$?
  local json
  json=$(grep '^{' "$out/ckpt-bench-gpu.json.log" | tail -1)
  [[ -n "$json" ]] && echo "$json" >"$out/ckpt-bench-gpu.json"
  case $rc in
    0) row ckpt-bench_--gpu measured "$(grep -E 'MISSED|ok$' "$out/ckpt-bench-gpu.json.log" |
                                        awk '{printf "%s %s %s; ", $1, $2, $NF}')" ;;
    77) row ckpt-bench_--gpu skipped "$(head -1 "$out/ckpt-bench-gpu.json.log" | cut -c1-90)" ;;
    *) row ckpt-bench_--gpu FAILED "exit $rc: $(tail -1 "$log" | cut -c1-90)" ;;
  esac
}

run_all() {
  local archive=$1
  mkdir -p "$out"
  work=$(mktemp -d /tmp/ckpt-gpu-check.XXXXXX)
  unpacked="$work/bundle"
  mkdir -p "$unpacked"
  # Python's lzma where the machine has no xz.
  if ! { command -v xz >/dev/null && xz -dc "$archive" | tar -C "$unpacked" -xf -; } &&
    ! python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$archive" "$unpacked"; then
    echo "gpu-check: cannot unpack $archive"
    exit 1
  fi
  saved_library_path="${LD_LIBRARY_PATH:-}"
  export LD_LIBRARY_PATH="$unpacked/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The tests' compiled-in paths are this build's: point them at the bundle.
  export CKPTD="$unpacked/bin/ckptd" CKPTCTL="$unpacked/bin/ckptctl"
  {
    date -u
    uname -a
    nvidia-smi 2>&1 || echo "no nvidia-smi"
  } >"$out/machine.log"
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
  row machine info "${gpu:-no GPU seen by nvidia-smi}; $(nproc) cores"
  run_catch cuda_runtime_test
  run_catch gpu_checkpoint_test
  # The agent's Python without the bundled libraries on its path (torch
  # brings its own); the module finds them by its rpath.
  LD_LIBRARY_PATH="$saved_library_path" run_agent
  run_bench
  [[ -f "$out/ckpt-bench-gpu.json" ]] && cat "$out/ckpt-bench-gpu.json"
  echo
  echo "gpu-check: logs under $out"
  printf '%-26s %-8s %s\n' part result detail
  printf '%s\n' "${table[@]}"
  rm -rf "$work"
  exit $failed
}

case "${1:-}" in
  --run) run_all "${2:-$bundle_file}" ;;
  --bundle) make_bundle ;;
  "")
    make_bundle
    CKPT_PYTHON="${CKPT_PYTHON:-$([[ -x .venv/bin/python ]] && echo "$repo/.venv/bin/python" || echo python3)}" \
      run_all "$bundle_file"
    ;;
  *) echo "usage: $0 [--bundle | --run BUNDLE]" >&2; exit 2 ;;
esac
