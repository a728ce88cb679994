#!/usr/bin/env bash
# Acceptance 2 of the memory tier in network namespaces: two namespaced
# hosts (tools/dev/cluster.sh; loopback without root) save to memory with a
# replica each; host h1's ckptd is SIGKILLed and started empty; the ranks
# restore from memory, h1's from h0's copy over the peer data channel, each
# rank checking every byte, and no host reads storage
# (tools/bench/memory-peer-bench.sh at a small size, which fails otherwise).
#   tests/memory_tier_netns_test.sh CKPTD CKPTCTL CKPT_DEMO_RANK
set -euo pipefail
export CKPTD="${1:?ckptd}" CKPTCTL="${2:?ckptctl}" CKPT_DEMO_RANK="${3:?ckpt-demo-rank}"
export CKPT_CLUSTER_HEARTBEAT_S=0.2 CKPT_CLUSTER_TIMEOUT_S=1.5
bench="$(cd "$(dirname "$0")/.." && pwd)/tools/bench/memory-peer-bench.sh"
out="$("$bench" --scale 8 --rounds 2 --json)"
echo "$out"
grep -q '"peer_restore_gbps":' <<<"$out" || { echo "memory_tier_netns_test: FAIL: no figure" >&2; exit 1; }
if [ "$(id -u)" -eq 0 ] && ip netns list >/dev/null 2>&1; then
  grep -q '"link":"netns"' <<<"$out" || { echo "memory_tier_netns_test: FAIL: not namespaced" >&2; exit 1; }
fi
echo "memory_tier_netns_test: ok"
