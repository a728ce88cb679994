#!/usr/bin/env bash
# The cluster harness (tools/dev/cluster.sh) with the coordinator role:
# three namespaced hosts register; a host whose link is cut, and one whose
# daemon is SIGKILLed, are declared lost within the heartbeat timeout
# (plus the sweep), the others stay alive; healed and restarted hosts come
# back; `down` leaves no daemon, namespace or bridge behind. Without root
# (no namespaces) it runs on loopback and skips the link cut.
#   tests/cluster_harness_test.sh CKPTD CKPTCTL
set -euo pipefail
export CKPTD="${1:?ckptd}" CKPTCTL="${2:?ckptctl}"
export CKPT_CLUSTER_HEARTBEAT_S=0.2 CKPT_CLUSTER_TIMEOUT_S=1.5
cluster="$(cd "$(dirname "$0")/.." && pwd)/tools/dev/cluster.sh"
dir="$(mktemp -d /tmp/ckpt-cluster-test-XXXXXX)"
trap '"$cluster" down "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
fail() { echo "cluster_harness_test: FAIL: $*" >&2; for f in "$dir"/*/log; do echo "== $f"; tail -5 "$f"; done >&2; exit 1; }

"$cluster" up "$dir" 3
source "$dir/cluster.env"

# state HOST: alive, lost or missing, from `ckptctl cluster --json`.
state() {
  "$cluster" status "$dir" --json | python3 -c '
import json, sys
hosts = {h["host"]["host"]: h for h in json.load(sys.stdin).get("hosts", [])}
h = hosts.get(sys.argv[1])
print("missing" if h is None else ("lost" if h["lost"] else "alive"))' "$1"
}
# await HOST STATE SECONDS: polls (one RPC each, 0.05 s apart); prints the
# milliseconds it took.
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
await() {
  local start
  start=$(now_ms)
  while [ "$(state "$1")" != "$2" ]; do
    (( $(now_ms) - start > $3 * 1000 )) && fail "$1 not $2 within $3 s"
    sleep 0.05
  done
  echo $(( $(now_ms) - start ))
}

for h in h0 h1 h2; do await "$h" alive 30 >/dev/null; done
echo "3 hosts alive ($mode)"

# Lost within the timeout: 1.5 s, a sweep every 0.375 s, slack for a busy machine.
limit_ms=4000
if [ "$mode" = netns ]; then
  cut=$(now_ms)
  "$cluster" cut "$dir" 1
  await h1 lost 15 >/dev/null
  took=$(( $(now_ms) - cut ))
  (( took < limit_ms )) || fail "h1 lost only after $took ms"
  [ "$(state h0)" = alive ] && [ "$(state h2)" = alive ] || fail "a cut of h1 touched others"
  echo "link of h1 cut: lost after $took ms"
  "$cluster" heal "$dir" 1
  await h1 alive 30 >/dev/null
  echo "h1 healed: alive again"
else
  echo "loopback: no link to cut"
fi

killed=$(now_ms)
"$cluster" kill "$dir" 2
await h2 lost 15 >/dev/null
took=$(( $(now_ms) - killed ))
(( took < limit_ms )) || fail "h2 lost only after $took ms"
[ "$(state h0)" = alive ] || fail "the kill of h2 touched h0"
echo "daemon of h2 killed: lost after $took ms"
"$cluster" start "$dir" 2
await h2 alive 30 >/dev/null
echo "h2 restarted: alive again"

"$cluster" down "$dir"
if pgrep -f "storage_root=$dir/root" >/dev/null; then fail "daemons left after down"; fi
if [ "$mode" = netns ]; then
  if ip netns list | grep -q "ckpt-$tag-"; then fail "namespaces left after down"; fi
  if ip link show "ckbr$tag" >/dev/null 2>&1; then fail "bridge left after down"; fi
fi
echo "cluster_harness_test: ok"
