# Sourced by the install tests (install_test.sh, pip_install_test.sh) after
# setting test_name: a work directory removed at exit with the daemon it
# started, and the helpers both use.
work=$(mktemp -d "/tmp/ckpt-${test_name//_/-}-XXXXXX")
daemon_pid=""
cleanup() {
  if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "$test_name: FAIL: $*" >&2; exit 1; }
say() { echo "$test_name: [${SECONDS}s] $*"; }
# Runs a command quietly; shows its output when it fails.
quiet() {
  local log=$work/last.log
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$*"; }
}
# start_ckptd BINARY FLAGS...: ckptd on $work/root and $work/ckptd.sock. Its
# output goes through a fifo: this waits for the "serving" line, then keeps
# draining into $work/ckptd.log.
start_ckptd() {
  local binary="$1" line ready=""
  shift
  mkfifo "$work/ckptd.out"
  "$binary" --storage_root="$work/root" --socket_path="$work/ckptd.sock" "$@" \
    >"$work/ckptd.out" 2>&1 &
  daemon_pid=$!
  exec 3<"$work/ckptd.out"
  while IFS= read -r -t 30 line <&3; do
    echo "$line" >>"$work/ckptd.log"
    case "$line" in *"ckptd: serving"*) ready=1; break ;; esac
  done
  [ -n "$ready" ] || { cat "$work/ckptd.log" >&2; fail "$binary did not start"; }
  cat <&3 >>"$work/ckptd.log" &
}
