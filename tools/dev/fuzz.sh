#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in build-fuzz/ and
# runs each for SECONDS (default 600) from its seeds, tests/fuzz/corpus/<target>/.
#
#   tools/dev/fuzz.sh [SECONDS] [TARGET...]
#
# Per target it prints executions, exec/s and crashes: 0, or the input that
# crashed (ASan, UBSan, a failed CKPT_FUZZ_CHECK, an allocation beyond
# -malloc_limit_mb, RSS beyond -rss_limit_mb, one input beyond -timeout).
# Exits 1 when any target crashed. Under build-fuzz/fuzz/: corpus/<target>/
# (inputs found, kept for the next run), artifacts/<target>/ (crashes),
# logs/<target>.log. CKPT_FUZZ_JOBS=N runs N targets at once (default 1).
# Replay a crash: build-fuzz/tests/fuzz/<target> <crash file>.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_save_request fuzz_load_request fuzz_manifest fuzz_manifest_tables fuzz_node_plans fuzz_memory_plans
  fuzz_safetensors_header fuzz_chunk_codec fuzz_s3_documents)
jobs="${CKPT_FUZZ_JOBS:-1}"
build_dir="${CKPT_FUZZ_BUILD_DIR:-build-fuzz}"
out="$build_dir/fuzz"

source tools/dev/ccache-launcher.sh
source tools/dev/ninja-checked.sh
# -O1 keeps asserts and builds fast; only the fuzzers and what they link are built.
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DCKPT_BUILD_FUZZERS=ON -DCKPT_BUILD_TESTS=OFF -DCKPT_WITH_CUDA=OFF "${launcher[@]}" >/dev/null
mkdir -p "$out/logs"
if ! ninja_checked "$build_dir" "${targets[@]}" >"$out/logs/build.log" 2>&1; then
  tail -n 40 "$out/logs/build.log"
  echo "fuzz: the build failed or the compiler warned (log: $out/logs/build.log)" >&2
  exit 1
fi

run() {
  local t="$1" rc=0
  mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
  # New inputs go to the first corpus directory; the seeds stay as committed.
  "$build_dir/tests/fuzz/$t" "$out/corpus/$t" "tests/fuzz/corpus/$t" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=25 \
    -artifact_prefix="$out/artifacts/$t/" -print_final_stats=1 \
    >"$out/logs/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$out/logs/$t.rc"
}

for t in "${targets[@]}"; do
  rm -f "$out/logs/$t.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  run "$t" &
done
wait

failed=0
printf '%-20s %8s %12s %8s  %s\n' target seconds executions exec/s crashes
for t in "${targets[@]}"; do
  log="$out/logs/$t.log"
  status=$(cat "$out/logs/$t.rc" 2>/dev/null || echo '?')
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  # Slow units (over 10 s, under -timeout) are written too, but are no crash.
  crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | grep -v '/slow-unit-' | tail -1 || true)
  slow=$(grep -c 'Test unit written to .*/slow-unit-' "$log" || true)
  if [ "$status" != 0 ] || [ -n "$crash" ]; then
    failed=1
    printf '%-20s %8s %12s %8s  1: %s (exit %s; log %s)\n' "$t" "$seconds" "${execs:-?}" \
      "${rate:-?}" "${crash:-none written}" "$status" "$log"
  else
    note=""
    [ "$slow" = 0 ] || note="  ($slow slow units in $out/artifacts/$t/)"
    printf '%-20s %8s %12s %8s  0%s\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" "$note"
  fi
done
exit "$failed"
