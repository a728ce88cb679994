#!/usr/bin/env bash
# Applies .clang-format to every tracked C++ file, or with --check lists the
# files it would change and fails (the test suite's format_test).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The clang-format pinned in requirements.txt (.venv), so that every Debian
# release formats alike; the PATH's only where no .venv exists yet.
clang_format=clang-format
[ -x .venv/bin/clang-format ] && clang_format=.venv/bin/clang-format
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' | grep -v '^tests/fuzz/corpus/')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    if ! "$clang_format" --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
  done
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'format: not formatted (run tools/dev/format.sh): %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
"$clang_format" -i "${files[@]}"
