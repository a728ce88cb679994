#!/usr/bin/env bash
# Coordinator failover (issue "A coordinator that can die"): three
# coordinators elect their leader through a three-member etcd, three
# namespaced hosts follow it, and a job of 6 ranks saves across them. Each
# coordinator holds every commit 1.5 s at commit.before_fence, so a test
# can strike the leader mid-commit:
#   1. SIGKILL the leader mid-commit: every rank fails naming the
#      coordinator, another leads within 10 s, the same step then commits
#      once, under it, and loads bit-exact.
#   2. SIGSTOP the leader mid-commit until another has led and committed
#      that step; SIGCONT: its late commit is refused by the job's epoch
#      fence, and counted.
#   3. Cut the leader's link: another leads and commits; healed, the old
#      one stands by, its lost lease counted.
#   4. Lose one of three etcd members: the leader and saves go on.
#   5. Lose etcd's quorum: spread saves fail, naming why; a one-host save
#      to the memory tier goes on at once; quorum back, spread saves commit.
#   6. A spread save to the memory tier, then the leader SIGKILLed: the new
#      leader learns the step from the hosts and it loads from memory.
# Needs network namespaces (root): exits 77 (skipped) without them.
#   tests/cluster_failover_test.sh CKPTD CKPTCTL DEMO_RANK
set -euo pipefail
test_name=cluster_failover_test
source "$(dirname "$0")/cluster_test_lib.sh"
ttl_s=4
nranks=6  # 2 a host (cluster_test_lib.sh's await_ranks, all_ok)
export CKPT_CLUSTER_ETCD=3 CKPT_CLUSTER_COORDINATORS=3
export CKPT_CLUSTER_FLAGS="--memory_tier_bytes=$((64 << 20))"
export CKPT_CLUSTER_COORDINATOR_FLAGS="--etcd_lease_ttl_s=$ttl_s --fault_kill_at=commit.before_fence --fault_pause_s=1.5"
"$cluster" up "$dir" 3 >/dev/null
source "$dir/cluster.env"

# The leader (cJ) once it serves all three hosts, alive.
leader_serving() {
  local l
  l="$("$cluster" leader "$dir" 2>/dev/null)" || return 1
  "$cluster" status "$dir" "$l" --timeout 2 --json 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
hosts = s.get("hosts", [])
ok = s.get("election", {}).get("leading") and len(hosts) == 3 and not any(h.get("lost") for h in hosts)
sys.exit(0 if ok else 1)' || return 1
  echo "$l"
}
# await_new_leader OLD SECONDS: until a coordinator other than OLD leads and
# serves the hosts; prints it.
await_new_leader() {
  local start l
  start=$(now_ms)
  while true; do
    l="$(leader_serving)" && [ "$l" != "$1" ] && { echo "$l"; return 0; }
    (( $(now_ms) - start > $2 * 1000 )) && fail "no leader other than $1 within $2 s"
    sleep 0.05
  done
}
election_field() {  # cJ FIELD: a number (a flag as 0 or 1; absent: 0)
  "$cluster" status "$dir" "$1" --timeout 5 --json | python3 -c '
import json, sys
print(int(json.load(sys.stdin).get("election", {}).get(sys.argv[1], 0)))' "$2"
}
# fault_count cJ: how often its commits reached the fault point.
fault_count() { grep -c "fault point commit.before_fence reached" "$dir/$1/log" 2>/dev/null || true; }
await_fault() {  # cJ COUNT_BEFORE
  local start
  start=$(now_ms)
  until [ "$(fault_count "$1")" -gt "$2" ]; do
    (( $(now_ms) - start > 60000 )) && fail "$1 never reached commit.before_fence"
    sleep 0.02
  done
}

# ranks MODE STEP [FLAGS...]: 6 ranks, 2 a host, in the background; each
# leaves RANK.out and RANK.rc.
ranks() {
  local rank=0 host l mode="$1" step="$2"
  shift 2
  rm -f "$dir"/ranks/*
  for host in 0 1 2; do
    for l in 0 1; do
      ( set +e
        "$demo_rank" --socket="$dir/h$host/ckptd.sock" --job=job --mode="$mode" --step="$step" \
          --rank=$rank --world=6 --local_world=2 --local_rank=$l --saved_world=6 "$@" \
          >"$dir/ranks/$rank.out" 2>&1
        echo $? >"$dir/ranks/$rank.rc" ) &
      rank=$((rank + 1))
    done
  done
}
all_failed() {  # REGEX each rank's error must match
  local r
  for r in $(seq 0 5); do
    [ "$(cat "$dir/ranks/$r.rc")" != 0 ] || fail "rank $r succeeded: $(cat "$dir/ranks/$r.out")"
    grep -Eq "$1" "$dir/ranks/$r.out" || fail "rank $r does not say /$1/: $(cat "$dir/ranks/$r.out")"
  done
}
save_ok() {  # STEP: a spread save, then a load of it, both on every rank
  ranks save "$1"
  await_ranks 60
  all_ok
  ranks load "$1"
  await_ranks 60
  all_ok
}
steps() { ls "$dir/root/job" | grep -c "^step-$1\$" || true; }

first="$(await_new_leader none 30)"
save_ok 1
echo "$test_name: $first leads; step 1 saved and loaded"

# 1. SIGKILL mid-commit.
before=$(fault_count "$first")
ranks save 2
await_fault "$first" "$before"
killed=$(now_ms)
"$cluster" kill "$dir" "$first"
await_ranks 30
all_failed "coordinator"
[ "$(steps 2)" = 0 ] || fail "step 2 committed by a leader killed before its fence"
second="$(await_new_leader "$first" 10)"
took=$(( $(now_ms) - killed ))
save_ok 2
[ "$(steps 2)" = 1 ] || fail "step 2 is not committed exactly once"
[ "$(cat "$dir/root/job/EPOCH")" = "$(election_field "$second" epoch)" ] ||
  fail "EPOCH holds $(cat "$dir/root/job/EPOCH"), not $second's epoch"
echo "$test_name: SIGKILL $first: $second leads ${took} ms later; step 2 saved once under it"
"$cluster" start "$dir" "$first"

# 2. SIGSTOP mid-commit until another leader commits the step; SIGCONT.
before=$(fault_count "$second")
ranks save 3
await_fault "$second" "$before"
"$cluster" stop "$dir" "$second"
await_ranks 30
all_failed "leader changed|not the leader|lost contact"
third="$(await_new_leader "$second" 15)"
save_ok 3
"$cluster" cont "$dir" "$second"
start=$(now_ms)
until [ "$(election_field "$second" fenced_commits)" -ge 1 ]; do
  (( $(now_ms) - start > 20000 )) && fail "$second's late commit of step 3 was not fenced"
  sleep 0.05
done
[ "$(steps 3)" = 1 ] || fail "step 3 is not committed exactly once"
ranks load 3
await_ranks 60
all_ok
echo "$test_name: SIGSTOP $second mid-commit; $third committed step 3; SIGCONT: $second's commit fenced"

# 3. The leader's link cut, then healed.
lost_before=$(election_field "$third" leases_lost)
"$cluster" cut "$dir" "$third"
fourth="$(await_new_leader "$third" 15)"
save_ok 4
"$cluster" heal "$dir" "$third"
start=$(now_ms)
until [ "$(election_field "$third" leases_lost)" -gt "$lost_before" ] &&
  [ "$(election_field "$third" leading)" = 0 ]; do
  (( $(now_ms) - start > 20000 )) && fail "$third does not stand by after its link healed"
  sleep 0.05
done
[ "$(steps 4)" = 1 ] || fail "step 4 is not committed exactly once"
echo "$test_name: $third cut off: $fourth leads and commits; healed, $third stands by"

# 4. One etcd member of three lost: nothing stops.
epoch=$(election_field "$fourth" epoch)
"$cluster" kill "$dir" e0
save_ok 5
[ "$(leader_serving)" = "$fourth" ] || fail "the leader changed when one etcd member of three died"
[ "$(election_field "$fourth" epoch)" = "$epoch" ] || fail "a new term began when one etcd member died"
echo "$test_name: etcd member e0 lost: $fourth still leads (epoch $epoch); step 5 saved"

# 5. Quorum lost: spread saves fail, naming why; a one-host memory-tier
# save goes on; quorum back, spread saves commit again.
"$cluster" kill "$dir" e1
start=$(now_ms)
until [ "$(election_field "$fourth" leading)" = 0 ]; do
  (( $(now_ms) - start > 4 * ttl_s * 1000 )) && fail "$fourth still leads without etcd's quorum"
  sleep 0.05
done
ranks save 6
await_ranks 60
all_failed "not the leader|no coordinator leads|lost contact|etcd"
local_start=$(now_ms)
"$demo_rank" --socket="$dir/h0/ckptd.sock" --job=alone --mode=save --step=1 --rank=0 --world=1 \
  --tier=memory >"$dir/ranks/alone.out" 2>&1 || fail "one-host memory save: $(cat "$dir/ranks/alone.out")"
local_took=$(( $(now_ms) - local_start ))
(( local_took < ttl_s * 1000 )) || fail "a one-host memory save took ${local_took} ms without etcd"
"$cluster" start "$dir" e0
"$cluster" start "$dir" e1
back="$(await_new_leader none 30)"
save_ok 6
echo "$test_name: quorum lost: spread saves failed named, a one-host memory save took ${local_took} ms; quorum back: $back leads, step 6 saved"

# 6. A step in the hosts' memory tier outlives its leader: the next one
# learns it from the hosts' registrations and loads it from memory.
ranks save 7 --tier=memory
await_ranks 60
all_ok
"$cluster" kill "$dir" "$back"
after="$(await_new_leader "$back" 15)"
grep -q "learnt [0-9]* memory-tier steps from host" "$dir/$after/log" ||
  fail "$after learnt no memory-tier step from the hosts"
ranks load 7 --from=memory
await_ranks 60
all_ok
for r in $(seq 0 5); do
  grep -q "tiers=memory" "$dir/ranks/$r.out" || fail "rank $r did not load step 7 from memory: $(cat "$dir/ranks/$r.out")"
done
echo "$test_name: step 7 saved to memory under $back; $after, elected after its SIGKILL, loads it from the hosts' memory"
echo "$test_name: PASS"
