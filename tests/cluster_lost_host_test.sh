#!/usr/bin/env bash
# A host lost at each phase of a job spread over three namespaced hosts
# (issue "Jobs spread over hosts"): h2's link is cut before the save's
# planning (its ranks attached, their plans not sent), after the planning,
# during the snapshot, during the commit (the coordinator held just before
# its rename), before a spread load's planning and during the load; and its
# daemon is SIGKILLed during the snapshot. Each time every rank's call
# fails within the heartbeat timeout + 2 s: the other hosts' ranks name h2
# and, for saves, the ranks it carried; h2's own ranks say they lost the
# coordinator (or, loading, the peer they cannot reach; killed, their
# ckptd). A save begun after the loss fails too, and the job restarted
# without h2 saves. Nothing is committed and nothing stays behind; after
# healing the next save commits and loads. Needs network namespaces
# (root): exits 77 (skipped) without them.
#   tests/cluster_lost_host_test.sh CKPTD CKPTCTL DEMO_RANK
set -euo pipefail
test_name=cluster_lost_host_test
source "$(dirname "$0")/cluster_test_lib.sh"
limit_ms=3500  # the heartbeat timeout + 2 s

"$cluster" up "$dir" 3 >/dev/null
source "$dir/cluster.env"

# ranks MODE STEP [FLAGS...]: 8 ranks, 3 on h0, 3 on h1, 2 on h2, in the
# background; each leaves RANK.out and RANK.rc.
per_host=(3 3 2)
ranks() {
  local rank=0 host local_rank mode="$1" step="$2"
  shift 2
  rm -f "$dir"/ranks/* "$dir/go"
  for host in 0 1 2; do
    for ((local_rank = 0; local_rank < per_host[host]; local_rank++, rank++)); do
      ( set +e
        "$demo_rank" --socket="$dir/h$host/ckptd.sock" --job=job --mode="$mode" --step="$step" \
          --rank=$rank --world=8 --local_world="${per_host[host]}" --local_rank=$local_rank \
          --saved_world=8 "$@" >"$dir/ranks/$rank.out" 2>&1
        echo $? >"$dir/ranks/$rank.rc" ) &
    done
  done
}
# cut_h2 PHASE [what h0's and h1's ranks must say [what h2's must say
# (grep -E) [cut, or kill: SIGKILL its daemon]]]: cuts h2's link now and
# checks that every rank fails within limit_ms, naming h2.
cut_h2() {
  local phase="$1" says="${2:-host h2}" cut took r
  local own="${3:-lost contact with the coordinator}" how="${4:-cut}"
  cut=$(now_ms)
  "$cluster" "$how" "$dir" 2
  [ -e "$dir/go.next" ] && mv "$dir/go.next" "$dir/go"
  await_ranks 60
  took=$(( $(now_ms) - cut ))
  for r in $(seq 0 7); do
    [ "$(cat "$dir/ranks/$r.rc")" != 0 ] || fail "$phase: rank $r succeeded though h2 was lost"
    if [ "$r" -lt 6 ]; then
      grep -q "$says" "$dir/ranks/$r.out" ||
        fail "$phase: rank $r (exit $(cat "$dir/ranks/$r.rc")) does not say \"$says\": $(cat "$dir/ranks/$r.out")"
    else
      grep -qE "$own" "$dir/ranks/$r.out" ||
        fail "$phase: rank $r of h2 does not say \"$own\": $(cat "$dir/ranks/$r.out")"
    fi
  done
  (( took < limit_ms )) || fail "$phase: ranks failed only $took ms after the cut (limit $limit_ms)"
  echo "h2 ${how/kill/killed} $phase: all 8 ranks failed within $took ms, naming h2"
}
# restore_h2 [FLAGS...]: heals h2's link and restarts its daemon with FLAGS.
restore_h2() {
  "$cluster" heal "$dir" 2
  "$cluster" kill "$dir" 2
  "$cluster" start "$dir" 2 "$@"
  await_alive h2
}
# Until the coordinator heard from h2 that it carries ranks 6 and 7.
await_carried() {
  local start
  start=$(now_ms)
  until "$cluster" status "$dir" --json | python3 -c '
import json, sys
hosts = {h["host"]["host"]: h for h in json.load(sys.stdin).get("hosts", [])}
jobs = hosts.get("h2", {}).get("jobs", [])
sys.exit(0 if any(j["job"] == "job" and j.get("ranks") == [6, 7] for j in jobs) else 1)'; do
    (( $(now_ms) - start > 30000 )) && fail "the coordinator never heard that h2 carries ranks 6, 7"
    sleep 0.05
  done
}
nothing_left() {  # STEP: no step-STEP and, once the removals that follow a failure ran, no partial
  local left start
  start=$(now_ms)
  while :; do
    left="$(ls -a "$dir/root/job" | grep -e "^step-$1\$" -e '\.partial-' || true)"
    [ -z "$left" ] && return 0
    grep -q "^step-$1\$" <<<"$left" && fail "step $1 was committed"
    (( $(now_ms) - start > 10000 )) && fail "step $1 left behind: $left"
    sleep 0.05
  done
}

await_alive
ranks save 1
await_ranks 120
all_ok
echo "step 1 saved by 8 ranks on 3 hosts"

# Before planning: h2's ranks attached, the coordinator heard of them, and
# the link goes before any plan is sent.
ranks save 2 --go_file="$dir/go"
await_carried
"$cluster" status "$dir" | grep -q "ranks 6, 7 of job job (world 8)" ||
  fail "ckptctl cluster does not show h2's ranks: $("$cluster" status "$dir")"
touch "$dir/go.next"
cut_h2 "before planning" "host h2 (ranks 6, 7 of 8"
nothing_left 2

# A save begun once the loss is known fails too, within the lost-ranks
# grace (two heartbeat intervals), naming h2 ...
start=$(now_ms)
until "$cluster" status "$dir" --json | python3 -c '
import json, sys
hosts = {h["host"]["host"]: h for h in json.load(sys.stdin).get("hosts", [])}
sys.exit(0 if hosts.get("h2", {}).get("lost") else 1)'; do
  (( $(now_ms) - start > 30000 )) && fail "h2 never lost"
  sleep 0.05
done
start=$(now_ms)
ranks save 2
await_ranks 60
took=$(( $(now_ms) - start ))
(( took < limit_ms )) || fail "after the loss: ranks failed only $took ms after they began"
for r in 0 1 2 3 4 5; do
  [ "$(cat "$dir/ranks/$r.rc")" != 0 ] || fail "after the loss: rank $r saved without h2's ranks"
  grep -q "host h2 (ranks 6, 7 of 8" "$dir/ranks/$r.out" ||
    fail "after the loss: rank $r does not name h2: $(cat "$dir/ranks/$r.out")"
done
echo "a save begun after h2 was lost: failed within $took ms, naming h2"
# ... but the job restarted without h2 (its ranks 6 and 7 on h0 and h1)
# saves: their hosts' heartbeats say they carry them now.
per_host=(4 4 0)
ranks save 2
await_ranks 120
all_ok
per_host=(3 3 2)
echo "the job restarted on h0 and h1 alone saves step 2"
restore_h2 --fault_kill_at=save.planned --fault_pause_s=1

# After planning: h2 holds its part of the plan (one of its ranks paused).
ranks save 3
await_line "$dir/h2/log" "fault point save.planned reached"
cut_h2 "after planning" "host h2 (ranks 6, 7 of 8"
restore_h2 --fault_kill_at=save.chunk_written --fault_pause_s=1
nothing_left 3

# During the snapshot: h2 is writing its chunks.
ranks save 4
await_line "$dir/h2/log" "fault point save.chunk_written reached"
cut_h2 "during the snapshot" "host h2 (ranks 6, 7 of 8"
restore_h2
nothing_left 4

# During the commit: every host reported, the coordinator is held just
# before its rename.
"$cluster" kill "$dir" coord
"$cluster" start "$dir" coord --fault_kill_at=commit.before_rename --fault_pause_s=2
await_alive coord
ranks save 5
await_line "$dir/coord/log" "fault point commit.before_rename reached"
cut_h2 "during the commit" "host h2 (ranks 6, 7 of 8"
restore_h2 --fault_kill_at=load.exchange --fault_pause_s=1
nothing_left 5

# Before a spread load's planning: as before the save's.
ranks load -1 --go_file="$dir/go"
await_carried
touch "$dir/go.next"
cut_h2 "before a load's planning" "host h2 (ranks 6, 7 of 8"
restore_h2 --fault_kill_at=load.exchange --fault_pause_s=1

# During a spread load: h2 is exchanging chunks with the others.
ranks load -1
await_line "$dir/h2/log" "fault point load.exchange reached"
# h2's own ranks fail on whichever comes first: the coordinator's silence
# or a peer it cannot reach.
cut_h2 "during a spread load" "host h2" "lost contact with the coordinator|cannot connect to peer"
restore_h2 --fault_kill_at=save.chunk_written --fault_pause_s=1

# h2's daemon SIGKILLed during the snapshot: the same for the others; its
# own ranks lose their daemon.
ranks save 6
await_line "$dir/h2/log" "fault point save.chunk_written reached"
cut_h2 "during the snapshot" "host h2 (ranks 6, 7 of 8" "ckptd" kill
restore_h2
nothing_left 6

ranks save 6
await_ranks 120
all_ok
ranks load -1
await_ranks 120
all_ok
grep -q "loaded step 6" "$dir/ranks/0.out" || fail "latest is not step 6: $(cat "$dir/ranks/0.out")"
echo "healed: step 6 saves and loads"

"$cluster" down "$dir" >/dev/null
echo "cluster_lost_host_test: ok"
