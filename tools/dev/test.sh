#!/usr/bin/env bash
# One command: installs the dependencies, builds, runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/dev/install-deps.sh
tools/dev/build.sh
cd "${CKPT_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 600
