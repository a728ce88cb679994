#!/usr/bin/env bash
# Coordinator failover (issue "A coordinator that can die", docs/failover.md):
# how long a job spread over hosts goes without a committed checkpoint when
# the leading coordinator is SIGKILLed, and what the epoch fence costs a
# commit.
#
# Three coordinators elect their leader through a three-member etcd, three
# hosts follow it, each daemon in its own network namespace
# (tools/dev/cluster.sh; needs root). A job of 6 ranks (2 a host) saves
# once; then, --kills times: the leader is SIGKILLed, and the job saves its
# next step again and again, as a trainer retrying its checkpoint would,
# until one commits on every rank. failover_s of that kill is the time from
# the SIGKILL to that commit; the killed coordinator is then started again
# (a standby). The lease is the daemons' default (--etcd_lease_ttl_s, 5 s)
# unless --ttl says otherwise.
#
# The fence's cost: --commits saves of the same job, measured as each rank
# reports its commit (the time from its snapshot to the coordinator's
# answer; median over ranks and saves), on this cluster (every commit
# fenced by the leader's epoch) and on one of a single coordinator without
# etcd (no fence), brought up on the same machine in the same run.
#
#   tools/bench/failover-bench.sh [--kills N] [--ttl S] [--commits N] [--json]
#
# Prints the figures, or with --json one line: kills, lease_ttl_s,
# failover_median_s, failover_max_s, failover_min_s, failed_attempts (saves
# that failed while no coordinator could commit), commit_fenced_median_ms,
# commit_unfenced_median_ms, fence_cost_ms. Needs a built tree
# (CKPT_BUILD_DIR, default build/; or CKPTD, CKPTCTL, CKPT_DEMO_RANK).
set -euo pipefail
cd "$(dirname "$0")/../.."
kills=20
ttl=""
commits=20
json=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) kills="$2"; shift 2 ;;
    --ttl) ttl="$2"; shift 2 ;;
    --commits) commits="$2"; shift 2 ;;
    --json) json=1; shift ;;
    *) echo "usage: $0 [--kills N] [--ttl S] [--commits N] [--json]" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "failover-bench: needs root and network namespaces" >&2
  exit 2
fi
build="$PWD/${CKPT_BUILD_DIR:-build}"
export CKPTD="${CKPTD:-$build/daemon/ckptd}" CKPTCTL="${CKPTCTL:-$build/tools/ckptctl/ckptctl}"
rank_bin="${CKPT_DEMO_RANK:-$build/tools/demo/ckpt-demo-rank}"
cluster="$PWD/tools/dev/cluster.sh"
dir="$(mktemp -d /tmp/ckpt-failover-XXXXXX)"
plain="$(mktemp -d /tmp/ckpt-failover-plain-XXXXXX)"
cleanup() {
  [ -z "${CKPT_BENCH_KEEP:-}" ] || return 0
  "$cluster" down "$dir" >/dev/null 2>&1 || true
  "$cluster" down "$plain" >/dev/null 2>&1 || true
  rm -rf "$dir" "$plain"
}
trap cleanup EXIT
log() { [ "$json" = 1 ] || echo "failover-bench: $*"; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

# save DIR STEP: 6 ranks save STEP; 0 when every rank committed. Each
# rank's "committed X ms" goes to DIR/commit_ms.
save() {
  local d="$1" step="$2" rank=0 host l rc=0
  rm -rf "$d/ranks"
  mkdir -p "$d/ranks"
  for host in 0 1 2; do
    for l in 0 1; do
      ( "$rank_bin" --socket="$d/h$host/ckptd.sock" --job=job --mode=save --step="$step" \
          --rank=$rank --world=6 --local_world=2 --local_rank=$l >"$d/ranks/$rank.out" 2>&1
        echo $? >"$d/ranks/$rank.rc" ) &
      rank=$((rank + 1))
    done
  done
  wait
  for rank in 0 1 2 3 4 5; do [ "$(cat "$d/ranks/$rank.rc")" = 0 ] || rc=1; done
  [ "$rc" = 0 ] && sed -nE 's/.*committed ([0-9.]+) ms.*/\1/p' "$d"/ranks/*.out >>"$d/commit_ms"
  return $rc
}
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

export CKPT_CLUSTER_ETCD=3 CKPT_CLUSTER_COORDINATORS=3
export CKPT_CLUSTER_COORDINATOR_FLAGS="${ttl:+--etcd_lease_ttl_s=$ttl}"
"$cluster" up "$dir" 3 >/dev/null
lease_ttl="${ttl:-5}"
# The leader, once it serves the three hosts.
serving_leader() {
  local l
  l="$("$cluster" leader "$dir" 2>/dev/null)" || return 1
  "$CKPTCTL" --socket "$dir/$l/ckptd.sock" --timeout 2 cluster --json 2>/dev/null |
    python3 -c '
import json, sys
s = json.load(sys.stdin)
hosts = s.get("hosts", [])
sys.exit(0 if s.get("election", {}).get("leading") and len(hosts) == 3 else 1)' || return 1
  echo "$l"
}
start=$(now_ms)
until leader="$(serving_leader)"; do
  (( $(now_ms) - start > 60000 )) && { echo "failover-bench: no leader within 60 s" >&2; exit 1; }
  sleep 0.1
done
step=1
save "$dir" $step || { echo "failover-bench: the first save failed: $(cat "$dir/ranks/0.out")" >&2; exit 1; }
failovers=()
failed=0
for ((k = 1; k <= kills; k++)); do
  leader="$(serving_leader)" || { sleep 0.2; k=$((k - 1)); continue; }
  step=$((step + 1))
  killed=$(now_ms)
  "$cluster" kill "$dir" "$leader"
  until save "$dir" $step; do
    failed=$((failed + 1))
    if (( $(now_ms) - killed > 120000 )); then
      echo "failover-bench: no commit 120 s after a kill; rank 0: $(cat "$dir/ranks/0.out")" >&2
      exit 1
    fi
    sleep 0.05
  done
  took=$(( $(now_ms) - killed ))
  failovers+=("$took")
  log "kill $k: $leader SIGKILLed; step $step committed $((took)) ms later"
  "$cluster" start "$dir" "$leader"
done
rm -f "$dir/commit_ms"
for ((k = 0; k < commits; k++)); do
  step=$((step + 1))
  save "$dir" $step || { echo "failover-bench: a fenced save failed: $(cat "$dir/ranks/0.out")" >&2; exit 1; }
done
fenced=$(median <"$dir/commit_ms")

unset CKPT_CLUSTER_ETCD CKPT_CLUSTER_COORDINATORS CKPT_CLUSTER_COORDINATOR_FLAGS
"$cluster" up "$plain" 3 >/dev/null
for ((k = 1; k <= commits; k++)); do
  until save "$plain" $k; do sleep 0.1; done  # the first waits for the hosts to register
done
unfenced=$(median <"$plain/commit_ms")

ms_list="$(printf '%s\n' "${failovers[@]}")"
python3 - "$kills" "$lease_ttl" "$failed" "$fenced" "$unfenced" "$json" <<PY
import json, statistics, sys
kills, ttl, failed, fenced, unfenced, as_json = sys.argv[1:7]
ms = [int(x) for x in """$ms_list""".split()]
out = {
    "kills": int(kills),
    "lease_ttl_s": float(ttl),
    "failover_median_s": round(statistics.median(ms) / 1000, 3),
    "failover_max_s": round(max(ms) / 1000, 3),
    "failover_min_s": round(min(ms) / 1000, 3),
    "failed_attempts": int(failed),
    "commit_fenced_median_ms": float(fenced),
    "commit_unfenced_median_ms": float(unfenced),
    "fence_cost_ms": round(float(fenced) - float(unfenced), 2),
}
if as_json == "1":
    print(json.dumps(out))
else:
    for k, v in out.items():
        print(f"{k:28s} {v}")
PY
