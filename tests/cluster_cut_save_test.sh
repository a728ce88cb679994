#!/usr/bin/env bash
# A host's link cut during a save spread over three namespaced hosts
# (issue "Many hosts", acceptance 5): h2 is stopped mid-save (a fault point
# pauses one of its ranks' planning thread) and its veth taken down. Every
# rank fails within a few heartbeat timeouts: the other hosts' ranks name
# h2, h2's own ranks say it lost the coordinator. Nothing is committed, no
# partial data stays, the previous step loads bit-exact (checked inside
# ckpt-demo-rank), and after healing the next save commits. Needs network
# namespaces (root): exits 77 (skipped) without them.
#   tests/cluster_cut_save_test.sh CKPTD CKPTCTL DEMO_RANK
set -euo pipefail
export CKPTD="${1:?ckptd}" CKPTCTL="${2:?ckptctl}"
demo_rank="${3:?ckpt-demo-rank}"
if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "cluster_cut_save_test: needs root and network namespaces; skipped"
  exit 77
fi
export CKPT_CLUSTER_HEARTBEAT_S=0.2 CKPT_CLUSTER_TIMEOUT_S=1.5
cluster="$(cd "$(dirname "$0")/.." && pwd)/tools/dev/cluster.sh"
dir="$(mktemp -d /tmp/ckpt-cut-test-XXXXXX)"
trap '"$cluster" down "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
fail() {
  echo "cluster_cut_save_test: FAIL: $*" >&2
  for f in "$dir"/*/log "$dir"/ranks/*.out; do [ -e "$f" ] && { echo "== $f"; tail -5 "$f"; }; done >&2
  exit 1
}
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

"$cluster" up "$dir" 3 >/dev/null
source "$dir/cluster.env"
mkdir -p "$dir/ranks"

# ranks MODE STEP: 8 ranks, 3 on h0, 3 on h1, 2 on h2, in the background;
# each leaves RANK.out and RANK.rc.
per_host=(3 3 2)
ranks() {
  local rank=0 host local_rank
  rm -f "$dir"/ranks/*
  for host in 0 1 2; do
    for ((local_rank = 0; local_rank < per_host[host]; local_rank++, rank++)); do
      ( set +e
        "$demo_rank" --socket="$dir/h$host/ckptd.sock" --job=job --mode="$1" --step="$2" \
          --rank=$rank --world=8 --local_world="${per_host[host]}" --local_rank=$local_rank \
          --saved_world=8 >"$dir/ranks/$rank.out" 2>&1
        echo $? >"$dir/ranks/$rank.rc" ) &
    done
  done
}
await_ranks() {  # SECONDS
  local start
  start=$(now_ms)
  while [ "$(ls "$dir"/ranks/*.rc 2>/dev/null | wc -l)" -lt 8 ]; do
    (( $(now_ms) - start > $1 * 1000 )) && fail "ranks still running after $1 s"
    sleep 0.05
  done
}
all_ok() {
  local r
  for r in $(seq 0 7); do [ "$(cat "$dir/ranks/$r.rc")" = 0 ] || fail "rank $r: $(cat "$dir/ranks/$r.out")"; done
}
await_alive() {  # [HOST that was restarted: until its new daemon registered]
  local start
  start=$(now_ms)
  if [ -n "${1:-}" ]; then
    until grep -q "registered with coordinator" "$dir/$1/log"; do
      (( $(now_ms) - start > 30000 )) && fail "$1 did not register within 30 s"
      sleep 0.05
    done
  fi
  start=$(now_ms)
  until "$cluster" status "$dir" --json | python3 -c '
import json, sys
hosts = json.load(sys.stdin).get("hosts", [])
sys.exit(0 if len(hosts) == 3 and not any(h.get("lost") for h in hosts) else 1)'; do
    (( $(now_ms) - start > 30000 )) && fail "hosts not all alive within 30 s"
    sleep 0.05
  done
}

await_alive
ranks save 1
await_ranks 120
all_ok
echo "step 1 saved by 8 ranks on 3 hosts"

# h2 again, one of its ranks held 3 s once its plan arrives.
"$cluster" kill "$dir" 2
"$cluster" start "$dir" 2 --fault_kill_at=save.planned --fault_pause_s=3
await_alive h2
ranks save 2
start=$(now_ms)
until grep -q "fault point save.planned reached" "$dir/h2/log"; do
  (( $(now_ms) - start > 60000 )) && fail "h2 never planned step 2"
  sleep 0.02
done
cut=$(now_ms)
"$cluster" cut "$dir" 2
await_ranks 60
took=$(( $(now_ms) - cut ))
for r in $(seq 0 7); do
  [ "$(cat "$dir/ranks/$r.rc")" != 0 ] || fail "rank $r saved step 2 though h2 was cut off"
  if [ "$r" -lt 6 ]; then
    grep -q "host h2" "$dir/ranks/$r.out" || fail "rank $r does not name h2: $(cat "$dir/ranks/$r.out")"
  else
    grep -q "lost contact with the coordinator" "$dir/ranks/$r.out" ||
      fail "rank $r of h2 does not say it lost the coordinator: $(cat "$dir/ranks/$r.out")"
  fi
done
# The heartbeat timeout (1.5 s), the pause (3 s) for h2's held rank, slack.
(( took < 8000 )) || fail "ranks failed only $took ms after the cut"
echo "h2 cut mid-save: all 8 ranks failed within $took ms, naming h2"

"$cluster" heal "$dir" 2
"$cluster" kill "$dir" 2
"$cluster" start "$dir" 2
await_alive h2
[ -z "$(ls "$dir/root/job" | grep -e '^step-2$' -e '\.partial-' || true)" ] ||
  fail "left behind: $(ls -a "$dir/root/job")"
ranks load -1
await_ranks 120
all_ok
grep -q "loaded step 1" "$dir/ranks/0.out" || fail "latest is not step 1: $(cat "$dir/ranks/0.out")"
ranks save 3
await_ranks 120
all_ok
echo "healed: step 1 loads, step 3 saves"

"$cluster" down "$dir" >/dev/null
echo "cluster_cut_save_test: ok"
