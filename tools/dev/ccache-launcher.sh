# Sourced by the build scripts (from the checkout's root): sets `launcher`
# to the CMake arguments that compile through ccache, when it is installed.
# Paths are made relative to the checkout, so worktrees and fresh clones
# share hits.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
