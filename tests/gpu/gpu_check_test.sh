#!/usr/bin/env bash
# tools/dev/gpu-check.sh end to end, as it runs where no GPU is: the bundle
# builds and fits the device tool's carry limit, the agent's module is built
# from the bundle as on a machine with another Python (the path a GPU
# machine takes), and the run reports every part, failing none: skipped
# without a GPU, passed or measured with one.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d /tmp/gpu-check-test.XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "gpu_check_test: $*"; cat "$out/run.log"; exit 1; }

CKPT_GPU_CHECK_OUT="$out" CKPT_GPU_CHECK_BUILD_MODULE=1 tools/dev/gpu-check.sh >"$out/run.log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || fail "exit $rc"
grep -q "of the 64 MiB carry limit" "$out/run.log" || fail "no bundle size"
grep -q "command:   tools/dev/gpu-check.sh --run gpu-bundle/bundle.tar.xz" "$out/run.log" ||
  fail "no device call printed"
# The table comes last: one row per part.
table=$(sed -n '/^part  /,$p' "$out/run.log")
for part in cuda_runtime_test gpu_checkpoint_test agent_cuda_tensors ckpt-bench_--gpu; do
  grep -Eq "^$part +(passed|skipped|measured) " <<<"$table" || fail "$part: not reported as run"
done
# The module built from the bundle was imported: the agent's tests were
# collected (skipped or run), not refused at import.
grep -Eq "^agent_cuda_tensors +(skipped +[0-9]+ skipped|passed)" <<<"$table" ||
  fail "the agent's tests did not run on the module built from the bundle"
if ! nvidia-smi -L >/dev/null 2>&1; then
  grep -q '"skipped":true' "$out/run.log" || fail "ckpt-bench --gpu printed figures without a GPU"
fi
echo "gpu_check_test: ok"
