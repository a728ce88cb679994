# Sourced by the build scripts: ninja_checked DIR [TARGET...] builds with
# ninja and fails when the compiler printed a warning. The builds are
# warning-free with gcc 12 and clang 14 (Debian 12) and gcc 14 and clang 19
# (Debian 13), and stay so. Checked on the output rather than with -Werror,
# so that a user's newer compiler still builds; ccache replays a cached
# compile's warnings, so a fresh clone sees every one.
ninja_checked() {
  local dir="$1"
  shift
  local log="$dir/build.log"
  set -o pipefail
  ninja -C "$dir" -j"$(nproc)" "$@" 2>&1 | tee "$log" || return 1
  if grep -q ': warning: ' "$log"; then
    grep ': warning: ' "$log" | sort -u >&2
    echo "build: the compiler warned (above; the whole output is in $log)" >&2
    return 1
  fi
}
