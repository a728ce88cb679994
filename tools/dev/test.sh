#!/usr/bin/env bash
# One command: installs the dependencies, builds, runs the whole test suite,
# builds the release configuration with thread-safety analysis, then runs
# each fuzz target for 15 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/dev/install-deps.sh
tools/dev/build.sh
(cd "${CKPT_BUILD_DIR:-build}" && ctest --output-on-failure --timeout 600)
# The release configuration with clang's thread-safety analysis as errors
# (build-tsa/), which must carry no fault injection.
tools/dev/tsa-build.sh
# A short pass of every fuzzer (clang, build-fuzz/); a crash fails the
# suite. tools/dev/fuzz.sh alone runs long ones (docs/fuzzing.md).
CKPT_FUZZ_JOBS="${CKPT_FUZZ_JOBS:-$(nproc)}" tools/dev/fuzz.sh "${CKPT_FUZZ_SECONDS:-15}"
