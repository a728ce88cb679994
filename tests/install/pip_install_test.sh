#!/usr/bin/env bash
# pip_install_test: the agent installs with pip into an environment of its
# own, and works from there:
#  1. a new virtual environment, which borrows torch and the build backend
#     from .venv (a .pth file) so that nothing is downloaded;
#  2. `pip install --no-deps <checkout>` builds the pybind11 module through
#     pyproject.toml (scikit-build-core, CMake) into that environment;
#  3. from a directory outside the checkout, `import ckpt` resolves to the new
#     environment's site-packages (not the build tree), and a save to a real
#     ckptd loads back bit-exact.
set -euo pipefail

: "${CKPT_SOURCE_DIR:?}" "${CKPT_BUILD_DIR:?}" "${CKPT_PYTHON:?}" "${CKPTD:?}"
test_name=pip_install_test
source "$(dirname "$0")/script_support.sh"

# 1. Another environment.
quiet "$CKPT_PYTHON" -m venv "$work/env"
borrowed=$("$CKPT_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
site=$("$work/env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$borrowed" >"$site/borrowed-from-venv.pth"
say "made $work/env"

# 2. pip builds and installs the agent; the build directory persists in the
# build tree so a rerun is incremental, and compiles go through ccache.
source "$CKPT_SOURCE_DIR/tools/dev/ccache-launcher.sh"
settings=(--config-settings="build-dir=$CKPT_BUILD_DIR/pip-wheel")
for arg in "${launcher[@]}"; do
  settings+=(--config-settings="cmake.define.${arg#-D}")
done
export CCACHE_BASEDIR="$CKPT_SOURCE_DIR"
quiet "$work/env/bin/python" -m pip install --no-build-isolation --no-deps "${settings[@]}" \
  "$CKPT_SOURCE_DIR"
say "pip installed the agent"

# 3. Imported from the new environment, outside the checkout.
start_ckptd "$CKPTD" --pool_bytes=$((64 << 20)) --writer_threads=2
cd "$work"
env -u PYTHONPATH "$work/env/bin/python" - "$site" "$work/ckptd.sock" <<'PY' || fail "the installed agent"
import os, sys
import torch
import ckpt
site, socket = sys.argv[1], sys.argv[2]
where = os.path.realpath(ckpt.__file__)
assert where.startswith(os.path.realpath(site)), f"ckpt imported from {where}, not {site}"
assert os.path.realpath(ckpt._ckpt.__file__).startswith(os.path.realpath(site)), ckpt._ckpt.__file__
g = torch.Generator().manual_seed(11)
state = {"w": torch.randn(257, 31, generator=g), "b": torch.randn(7, generator=g).bfloat16()}
cp = ckpt.Checkpointer("pip", socket_path=socket)
cp.save(3, state, blocking=True).wait_persisted()
target = {k: torch.zeros_like(v) for k, v in state.items()}
assert cp.load("latest", target) == 3
for k in state:
    assert torch.equal(state[k].view(torch.uint8), target[k].view(torch.uint8)), k
print(f"imported from {where}; step 3 loaded back bit-exact")
PY
say "ok"
