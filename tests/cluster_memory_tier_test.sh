#!/usr/bin/env bash
# The memory tier of a job spread over three namespaced hosts (issue "Jobs
# spread over hosts"), each check able to fail:
#  - `ckptctl verify` at the coordinator checks every copy where it lives:
#    a replicated step passes; a byte of one replica flipped in one host's
#    memory (from outside, through /proc/PID/fd as root can) is named by
#    host and file; the same for an erasure-coded step's parity;
#  - a load's sources add up to its bytes (ckpt-demo-rank checks every
#    load), and a host restarted empty takes its bytes from a peer, or
#    rebuilt from parity;
#  - an every-5-steps policy over 20 spread steps leaves steps 5, 10, 15
#    and 20 complete on storage; they verify and load from storage.
# Needs network namespaces (root): exits 77 (skipped) without them.
#   tests/cluster_memory_tier_test.sh CKPTD CKPTCTL DEMO_RANK
set -euo pipefail
test_name=cluster_memory_tier_test
source "$(dirname "$0")/cluster_test_lib.sh"

# ranks JOB MODE STEP [FLAGS...]: 6 ranks, 2 on each host; waits for all.
ranks() {
  local job="$1" mode="$2" step="$3" rank=0 host local_rank
  shift 3
  rm -f "$dir"/ranks/*
  for host in 0 1 2; do
    for local_rank in 0 1; do
      ( set +e
        "$demo_rank" --socket="$dir/h$host/ckptd.sock" --job="$job" --mode="$mode" --step="$step" \
          --rank=$rank --world=6 --local_world=2 --local_rank=$local_rank --saved_world=6 "$@" \
          >"$dir/ranks/$rank.out" 2>&1
        echo $? >"$dir/ranks/$rank.rc" ) &
      rank=$((rank + 1))
    done
  done
  wait
}
all_ok() {
  local r
  for r in $(seq 0 5); do [ "$(cat "$dir/ranks/$r.rc")" = 0 ] || fail "rank $r: $(cat "$dir/ranks/$r.out")"; done
}
verify() {  # JOB STEP: ckptctl verify at the coordinator; its output in $out, its code in $verified
  verified=0
  "$CKPTCTL" --socket "$dir/coord/ckptd.sock" verify "$1" "$2" >"$dir/verify.out" 2>&1 || verified=$?
  out="$(cat "$dir/verify.out")"
}
# flip HOST JOB STEP FILE: flips a byte of FILE (data/..., or
# parity/...) of the job's step where HOST's ckptd holds it in memory.
flip() {
  python3 - "$(cat "$dir/$1/pid")" "/$2/" "step-$3" "/$4" <<'PY'
import os, sys
pid, job, step, name = sys.argv[1:]
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if "ckpt-memory-tier:" not in target or job not in target or step not in target:
        continue
    if not target.replace(" (deleted)", "").endswith(name):
        continue
    # The memory file is mapped in huge pages past its end: the first byte
    # that is not zero is one of the file's chunks.
    with open(f"/proc/{pid}/fd/{fd}", "r+b") as f:
        head = f.read(1 << 20)
        at = next((i for i, b in enumerate(head) if b != 0), None)
        if at is None:
            sys.exit(f"{target}: nothing but zeros")
        f.seek(at)
        f.write(bytes([head[at] ^ 0x01]))
    print(target)
    sys.exit(0)
sys.exit(f"no memory file {name} of {job} {step} in ckptd {pid}")
PY
}

# Replicas: each host's files also on the next host of the ring.
export CKPT_CLUSTER_FLAGS="--memory_tier_bytes=$((96 << 20)) --memory_tier_replicas=1"
"$cluster" up "$dir" 3 >/dev/null
await_alive
ranks rep save 1 --tier=memory
all_ok
verify rep 1
[ "$verified" = 0 ] || fail "verify of a whole replicated step failed: $out"
for h in h0 h1 h2; do grep -q "host $h: " <<<"$out" || fail "verify does not report $h: $out"; done
echo "verify of a replicated memory step: every host checked"

# A byte of h0's file flipped where h1 keeps its replica.
flip h1 rep 1 data/h0-0.bin >/dev/null || fail "no replica of h0's file on h1"
verify rep 1
[ "$verified" != 0 ] || fail "verify passed with a flipped replica: $out"
grep -q "host h1: data/h0-0.bin: corrupt" <<<"$out" || fail "verify does not name h1's replica: $out"
! grep -q "host h0: data/h0-0.bin" <<<"$out" || fail "verify blames h0's good copy: $out"
echo "a flipped replica: $(grep -m1 "host h1: data/h0-0.bin" <<<"$out")"

# h2 restarted empty: its ranks load its bytes from h0's replica, and every
# rank's sources add up to its bytes (ckpt-demo-rank fails otherwise).
"$cluster" kill "$dir" 2
"$cluster" start "$dir" 2 >/dev/null
await_alive h2
ranks rep load 1 --from=memory
all_ok
grep -q "sources=.*peer@h0" "$dir/ranks/4.out" || fail "h2's rank 4 took nothing from h0: $(cat "$dir/ranks/4.out")"
echo "h2 restarted empty: $(grep -m1 -o 'sources=[^ ]*' "$dir/ranks/4.out")"

# Every step to memory, every fifth also to storage, over 20 steps.
ranks policy save 1 --steps=20 --durable_every=5
all_ok
# A step saved to both tiers returns at its memory commit and is persisted
# in the background: the last one may still be on its way.
start=$(now_ms)
until [ -d "$dir/root/policy/step-20" ] || (( $(now_ms) - start > 60000 )); do sleep 0.05; done
durable="$(ls "$dir/root/policy" | grep '^step-' | sort -t- -k2 -n | tr '\n' ' ')"
[ "$durable" = "step-5 step-10 step-15 step-20 " ] || fail "durable steps: $durable"
! ls -a "$dir/root/policy" | grep -q '\.partial-' || fail "a partial copy stayed behind"
for step in 5 10 15; do
  verify policy $step
  [ "$verified" = 0 ] || fail "durable step $step does not verify: $out"
done
ranks policy load 10 --from=durable
all_ok
echo "durable every 5 over 20 spread steps: $durable; they verify and load"
"$cluster" down "$dir" >/dev/null

# Erasure 2+1: parity on the third host of each stripe.
export CKPT_CLUSTER_FLAGS="--memory_tier_bytes=$((96 << 20)) --memory_tier_erasure=2,1"
"$cluster" up "$dir" 3 >/dev/null
await_alive
ranks ec save 1 --tier=memory
all_ok
verify ec 1
[ "$verified" = 0 ] || fail "verify of an erasure-coded step failed: $out"
grep -q "parity shares" <<<"$out" || fail "verify checked no parity: $out"
# h1 restarted empty: its files are rebuilt from the others' data and
# parity, and its ranks' sources say so (adding up, as every load checks).
"$cluster" kill "$dir" 1
"$cluster" start "$dir" 1 >/dev/null
await_alive h1
ranks ec load 1 --from=memory
all_ok
grep -q "sources=.*parity@" "$dir/ranks/2.out" || fail "h1's rank 2 rebuilt nothing: $(cat "$dir/ranks/2.out")"
echo "h1 restarted empty: $(grep -m1 -o 'sources=[^ ]*' "$dir/ranks/2.out")"
parity_file="$(python3 - "$(cat "$dir/h0/pid")" <<'PY'
import os, sys
pid = sys.argv[1]
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if "ckpt-memory-tier:" in target and "/ec/" in target and "/parity/" in target:
        print("parity/" + target.replace(" (deleted)", "").split("/parity/", 1)[1])
        break
PY
)"
[ -n "$parity_file" ] || fail "h0 holds no parity of step 1"
flip h0 ec 1 "$parity_file" >/dev/null
verify ec 1
[ "$verified" != 0 ] || fail "verify passed with flipped parity: $out"
grep -q "host h0: $parity_file" <<<"$out" || fail "verify does not name h0's $parity_file: $out"
echo "flipped parity: $(grep -m1 "host h0: parity" <<<"$out")"

"$cluster" down "$dir" >/dev/null
echo "cluster_memory_tier_test: ok"
