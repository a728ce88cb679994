# What the namespaced cluster tests share (sourced, not run): the
# arguments, the root check, a 3-host cluster's directory and teardown,
# failing with the daemons' and ranks' last lines, and waits on files and
# on the hosts' liveness.
#   test_name=NAME; source tests/cluster_test_lib.sh CKPTD CKPTCTL DEMO_RANK
# Sets CKPTD, CKPTCTL, demo_rank, cluster (tools/dev/cluster.sh) and dir.
export CKPTD="${1:?ckptd}" CKPTCTL="${2:?ckptctl}"
demo_rank="${3:?ckpt-demo-rank}"
if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "$test_name: needs root and network namespaces; skipped"
  exit 77
fi
export CKPT_CLUSTER_HEARTBEAT_S=0.2 CKPT_CLUSTER_TIMEOUT_S=1.5
cluster="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/dev/cluster.sh"
dir="$(mktemp -d "/tmp/ckpt-$test_name-XXXXXX")"
trap '"$cluster" down "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
mkdir -p "$dir/ranks"

fail() {
  echo "$test_name: FAIL: $*" >&2
  for f in "$dir"/*/log "$dir"/ranks/*.out; do [ -e "$f" ] && { echo "== $f"; tail -5 "$f"; }; done >&2
  exit 1
}
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
# Ranks run in the background (the tests' ranks function), each leaving
# $dir/ranks/RANK.out and RANK.rc; $nranks of them (default 8).
# await_ranks SECONDS: until every rank ended.
await_ranks() {
  local start
  start=$(now_ms)
  while [ "$(ls "$dir"/ranks/*.rc 2>/dev/null | wc -l)" -lt "${nranks:-8}" ]; do
    (( $(now_ms) - start > $1 * 1000 )) && fail "ranks still running after $1 s"
    sleep 0.02
  done
}
# all_ok: every rank succeeded (else fail with its output).
all_ok() {
  local r
  for r in $(seq 0 $(( ${nranks:-8} - 1 ))); do
    [ "$(cat "$dir/ranks/$r.rc")" = 0 ] || fail "rank $r: $(cat "$dir/ranks/$r.out")"
  done
}
# await_line FILE TEXT: until FILE holds TEXT (60 s at most).
await_line() {
  local start
  start=$(now_ms)
  until grep -q "$2" "$1" 2>/dev/null; do
    (( $(now_ms) - start > 60000 )) && fail "no \"$2\" in $1 within 60 s"
    sleep 0.02
  done
}
# await_alive [NAME that was restarted: until its new daemon registered;
# the killed one looks alive until its heartbeat timeout]: until the
# coordinator holds 3 hosts, none lost.
await_alive() {
  local start
  start=$(now_ms)
  if [ -n "${1:-}" ] && [ "$1" != coord ]; then
    await_line "$dir/$1/log" "registered with coordinator"
  fi
  until "$cluster" status "$dir" --json | python3 -c '
import json, sys
hosts = json.load(sys.stdin).get("hosts", [])
sys.exit(0 if len(hosts) == 3 and not any(h.get("lost") for h in hosts) else 1)'; do
    (( $(now_ms) - start > 30000 )) && fail "hosts not all alive within 30 s"
    sleep 0.05
  done
}
