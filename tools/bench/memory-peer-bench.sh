#!/usr/bin/env bash
# Restore from a peer's memory against the link (issue "Memory tier",
# figure 6b). Two hosts, each in its own network namespace on a bridge
# (tools/dev/cluster.sh; loopback without root), and a coordinator; one
# rank per host saves a model to the memory tier, each host's part copied
# to the other (R=1). Host h1's ckptd is then SIGKILLed and started again
# with empty memory, and the two ranks load the step from memory: h1's rank
# gets every byte from h0 over the peer data channel. Its restore rate
# (bytes / the time from the last of the two ranks asking to load to h1's
# rank having every byte; each checks every byte after) is compared with
# raw TCP between the same two namespaces, measured right after (a Python
# sender and receiver moving the same number of bytes, the sender with
# sendfile from a memory file; the link's limit).
#
#   tools/bench/memory-peer-bench.sh [--layout same|reshard] [--scale N] [--rounds R] [--json]
#
# --layout same (the default): the ranks load the layout they saved, as a
# job restarted after a host loss does (tools/demo/parallel_layout.h, TP=2:
# each rank its own shards); the link carries what h1's rank gets.
# --layout reshard: the demo model saved under one sharding and loaded
# under another (tools/demo/model_layout.h); h1 then needs pieces of
# chunks rank 0 wrote, and each chunk crosses the link whole (its CRC32C
# is checked where it lands), about 1.7 times the bytes its rank gets.
# --scale: the model's size (default: about 0.55 GiB for either layout).
# Figures: peer_restore_gbps (median over rounds), raw_tcp_gbps (median),
# peer_restore_over_raw_tcp, link_bytes_over_restored (what crossed the
# link per byte the rank got). Fails when a rank's bytes differ (each rank
# checks every byte), the restore was not from memory, or any host read
# storage. Needs a built tree (CKPT_BUILD_DIR, default build/; or CKPTD,
# CKPTCTL, CKPT_DEMO_RANK).
set -euo pipefail
cd "$(dirname "$0")/../.."
layout=same
scale=""
rounds=3
json=0
while [ $# -gt 0 ]; do
  case "$1" in
    --layout) layout="$2"; shift 2 ;;
    --scale) scale="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --json) json=1; shift ;;
    *) echo "usage: $0 [--layout same|reshard] [--scale N] [--rounds R] [--json]" >&2; exit 2 ;;
  esac
done
# The model: about 0.85 MiB x scale^2 in the parallel layout, 1.4 MiB x
# scale in the demo one.
case "$layout" in
  same) scale="${scale:-25}"; layout_flags=(--layout=parallel --tp=2 --pp=1)
    model_mib=$(( (scale * scale * 85 + 99) / 100 )) ;;
  reshard) scale="${scale:-400}"; layout_flags=(--layout=demo)
    model_mib=$(( (scale * 14 + 9) / 10 )) ;;
  *) echo "--layout is same or reshard" >&2; exit 2 ;;
esac
build="$PWD/${CKPT_BUILD_DIR:-build}"
export CKPTD="${CKPTD:-$build/daemon/ckptd}" CKPTCTL="${CKPTCTL:-$build/tools/ckptctl/ckptctl}"
rank_bin="${CKPT_DEMO_RANK:-$build/tools/demo/ckpt-demo-rank}"
cluster="$PWD/tools/dev/cluster.sh"
dir="$(mktemp -d /tmp/ckpt-peer-restore-XXXXXX)"
# The pool and the memory tier in 2 MiB pages, as deploy/ckptd.service sets
# up the host (ckpt-bench does the same): restored when the run ends.
shmem=/sys/kernel/mm/transparent_hugepage/shmem_enabled
old_shmem="$(sed -nE 's/.*\[([a-z_]+)\].*/\1/p' "$shmem" 2>/dev/null || true)"
if [ "$old_shmem" = never ]; then
  if echo advise 2>/dev/null >"$shmem"; then
    echo "memory-peer-bench: $shmem set to advise for this run, as ckptd.service does" >&2
  else
    echo "memory-peer-bench: $shmem is never and not writable: 4 KiB pages" >&2
    old_shmem=""
  fi
else
  old_shmem=""
fi
cleanup() {
  [ -z "$old_shmem" ] || echo "$old_shmem" >"$shmem" 2>/dev/null || true
  [ -n "${CKPT_BENCH_KEEP:-}" ] || { "$cluster" down "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"; }
}
trap cleanup EXIT

# Room for the model, its replica and the blocks' rounding on each host.
# A pool as ckptd's default (1 GiB) where the model is that large, as
# tools/dev/cluster.sh's test daemons (128 MiB) for small runs.
pool=$(( model_mib * 3 / 2 << 20 ))
pool=$(( pool < (128 << 20) ? (128 << 20) : pool > (1 << 30) ? (1 << 30) : pool ))
export CKPT_CLUSTER_FLAGS="--memory_tier_bytes=$(( (model_mib * 3 + 512) << 20 )) --peer_wait_s=60 --pool_bytes=$pool"
"$cluster" up "$dir" 2 >/dev/null
# shellcheck disable=SC1091
source "$dir/cluster.env"
[ "$mode" = netns ] || echo "memory-peer-bench: no network namespaces (not root): loopback" >&2

ns() {  # HOST: the words that run a command in its namespace
  [ "$mode" = netns ] && echo "ip netns exec ckpt-$tag-$1"
}

# One rank per host, world 2; fails with the ranks' output.
run_ranks() {  # MODE STEP FLAGS...
  local pids=() i
  for i in 0 1; do
    "$rank_bin" --socket="$dir/h$i/ckptd.sock" --job=bench --mode="$1" --rank=$i --world=2 \
      --local_world=1 --local_rank=0 --step="$2" --saved_world=2 --scale="$scale" \
      "${layout_flags[@]}" "${@:3}" \
      >"$dir/rank$i.out" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" || { cat "$dir"/rank*.out >&2; exit 1; }
  done
}

# Raw TCP from h0 to h1: BYTES moved, GB/s at the receiver.
raw_tcp() {
  local bytes="$1" address port=7481
  if [ "$mode" = netns ]; then address="10.233.$net.11"; else address=127.0.0.1; port=$((base_port + 15)); fi
  # shellcheck disable=SC2046
  $(ns h1) python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(60)
c, _ = s.accept(); c.settimeout(None); buf = bytearray(16 << 20); view = memoryview(buf); got = 0
n = c.recv_into(view); start = time.monotonic(); got = n
while n:
    n = c.recv_into(view); got += n
print("%.4f" % (got / (time.monotonic() - start) / 1e9))' "$address" "$port" >"$dir/tcp.out" &
  local server=$!
  # The sender tries until the receiver listens: a loaded machine may take
  # seconds to start Python in a namespace. Both give up after 60 s, so
  # nothing waits for ever.
  # shellcheck disable=SC2046
  $(ns h0) python3 -c '
import os, socket, sys, time
# The bytes in a memory file, sent with sendfile: the kernel takes the
# pages as they lie, no copy out of the sender (as ckptd sends from its
# memory tier): the fastest a sender moves bytes, so the link is the limit.
total = int(sys.argv[3]); fd = os.memfd_create("raw-tcp"); block = os.urandom(1 << 20)
for _ in range(0, total, len(block)):
    os.write(fd, block)
deadline = time.monotonic() + 60
while True:
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
        break
    except (ConnectionRefusedError, OSError):
        if time.monotonic() > deadline:
            raise
        time.sleep(0.02)
c.settimeout(None)
sent = 0
while sent < total:
    n = os.sendfile(c.fileno(), fd, sent, total - sent)
    if n == 0:
        raise SystemExit("memory file ended early")
    sent += n
c.close()' "$address" "$port" "$bytes" || { echo "raw TCP sender in h0 failed" >&2; exit 1; }
  wait "$server" || { echo "raw TCP receiver in h1 failed (no sender within 60 s?)" >&2; exit 1; }
  tail -1 "$dir/tcp.out"
}

# Chunk bytes every host has read from storage, summed.
storage_read() {
  local i total=0 n
  for i in 0 1; do
    n="$("$CKPTCTL" --socket="$dir/h$i/ckptd.sock" status --json | python3 -c '
import json, sys
print(int(json.load(sys.stdin)["chunk_bytes_read"]))')"
    total=$((total + n))
  done
  echo "$total"
}

# Bytes host h1 took in over the peer data channel.
h1_peer_received() {
  "$CKPTCTL" --socket="$dir/h1/ckptd.sock" status --json | python3 -c '
import json, sys
print(int(json.load(sys.stdin)["peer_bytes_received"]))'
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

restores=()
tcps=()
links=()
for round in $(seq 1 "$rounds"); do
  run_ranks save "$round" --tier=memory
  old="$(cat "$dir/h1/pid")"
  "$cluster" kill "$dir" 1 >/dev/null
  # Gone, memory and socket with it, before the new one starts.
  while kill -0 "$old" 2>/dev/null; do sleep 0.05; done
  "$cluster" start "$dir" 1 >/dev/null
  # Timed from the new h1 registered (it waits for its old instance to be
  # declared lost first; a load before that waits for it).
  for _ in $(seq 1 600); do
    grep -q "registered with coordinator" "$dir/h1/log" 2>/dev/null && break
    sleep 0.05
  done
  read_before="$(storage_read)"
  link_before="$(h1_peer_received)"
  run_ranks load -1 --from=memory
  [ "$(storage_read)" = "$read_before" ] || { echo "the restore read storage" >&2; exit 1; }
  link_bytes=$(( $(h1_peer_received) - link_before ))
  line="$(grep "loaded step $round:" "$dir/rank1.out")" ||
    { cat "$dir"/rank*.out >&2; exit 1; }
  grep -q "tiers=memory " <<<"$line" || { echo "not from memory: $line" >&2; exit 1; }
  mib="$(sed -E 's/.*: ([0-9.]+) MiB in ([0-9.]+) ms.*/\1/' <<<"$line")"
  # From the last rank's Load call (the hosts' parts are planned together,
  # once every rank asked; a rank that came early waited for the others,
  # which is their start-up, not the restore) to h1's rank having it all.
  asked0="$(sed -nE 's/.* window_us=([0-9]+)-[0-9]+.*/\1/p' "$dir/rank0.out")"
  asked1="$(sed -nE 's/.* window_us=([0-9]+)-[0-9]+.*/\1/p' <<<"$line")"
  ended1="$(sed -nE 's/.* window_us=[0-9]+-([0-9]+).*/\1/p' <<<"$line")"
  [ -n "$asked0" ] && [ -n "$asked1" ] && [ -n "$ended1" ] ||
    { echo "a rank printed no load window" >&2; cat "$dir"/rank*.out >&2; exit 1; }
  us=$((ended1 - (asked0 > asked1 ? asked0 : asked1)))
  restores+=("$(awk -v m="$mib" -v t="$us" 'BEGIN {printf "%.4f", m * 1048576 / (t / 1e6) / 1e9}')")
  bytes="$(awk -v m="$mib" 'BEGIN {printf "%d", m * 1048576}')"
  links+=("$(awk -v l="$link_bytes" -v b="$bytes" 'BEGIN {printf "%.3f", l / b}')")
  tcps+=("$(raw_tcp "$bytes")")
done
restore="$(printf '%s\n' "${restores[@]}" | median)"
tcp="$(printf '%s\n' "${tcps[@]}" | median)"
ratio="$(awk -v a="$restore" -v b="$tcp" 'BEGIN {printf "%.4f", a / b}')"
link="$(printf '%s\n' "${links[@]}" | median)"
if [ "$json" = 1 ]; then
  printf '{"mode":"memory_peer_restore","link":"%s","layout":"%s","scale":%d,"rank_mib":%s,' \
    "$mode" "$layout" "$scale" "$mib"
  printf '"rounds":%d,"peer_restore_gbps":%s,"raw_tcp_gbps":%s,"peer_restore_over_raw_tcp":%s,' \
    "$rounds" "$restore" "$tcp" "$ratio"
  printf '"link_bytes_over_restored":%s}\n' "$link"
else
  echo "restore of h1's rank from h0's memory: ${restore} GB/s (rounds: ${restores[*]})"
  echo "raw TCP h0 -> h1 (${mode}), same bytes: ${tcp} GB/s (rounds: ${tcps[*]})"
  echo "peer_restore_over_raw_tcp: ${ratio}"
  echo "bytes over the link per byte h1's rank got: ${link} (rounds: ${links[*]})"
fi
