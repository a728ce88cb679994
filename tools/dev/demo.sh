#!/usr/bin/env bash
# One command: installs the dependencies, builds, and demonstrates ckpt on
# this machine. A ckptd on a temporary directory; four ranks save a few
# hundred MiB of sharded tensors (TP boxes, DP replicas, FSDP flat ranges,
# a scalar, objects); ckptd is stopped and restarted; three ranks load them
# back under another sharding and check every byte; ckptctl lists and
# verifies the checkpoint. Then many hosts: a coordinator and three node
# daemons (each in its own network namespace as root, on loopback ports
# otherwise) share one storage root; eight ranks spread over the three
# hosts save one checkpoint, six ranks on two hosts load it resharded.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/dev/install-deps.sh
tools/dev/build.sh
bin="${CKPT_BUILD_DIR:-build}"
scale="${CKPT_DEMO_SCALE:-200}"  # 200: about 275 MiB of unique tensor bytes

work="$(mktemp -d /tmp/ckpt-demo-XXXXXX)"
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  [ -e "$work/cluster/cluster.env" ] && tools/dev/cluster.sh down "$work/cluster" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

start_daemon() {
  "$bin/daemon/ckptd" --storage_root="$work/root" --socket_path="$work/ckptd.sock" \
    --pool_bytes=$((1536 << 20)) >"$work/ckptd.log" 2>&1 &
  daemon_pid=$!
  # ckptd prints "serving" once it listens.
  for _ in $(seq 600); do
    grep -q "ckptd: serving" "$work/ckptd.log" && break
    kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/ckptd.log"; exit 1; }
    sleep 0.05
  done
  sed 's/^/  /' "$work/ckptd.log"
}
stop_daemon() {
  kill "$daemon_pid"
  wait "$daemon_pid" || true
  daemon_pid=""
}
ranks() {  # ranks MODE WORLD STEP
  local pids=()
  for ((r = 0; r < $2; r++)); do
    "$bin/tools/demo/ckpt-demo-rank" --socket="$work/ckptd.sock" --job=demo --mode="$1" \
      --rank=$r --world="$2" --step="$3" --scale="$scale" --saved_world=4 &
    pids+=($!)
  done
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  return $failed
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f s", b - a }'; }

echo "== ckptd on $work"
start_daemon
t=$(now)
echo "== 4 ranks save step 100 (TP row boxes, DP replicas, FSDP flat ranges, objects)"
ranks save 4 100
echo "   save phase: $(elapsed "$t")"
echo "== restart ckptd (the checkpoint is on disk, nothing in memory)"
stop_daemon
start_daemon
t=$(now)
echo "== 3 ranks load the latest step with another sharding (column boxes, flat ranges, row boxes)"
ranks load 3 -1
echo "   load phase: $(elapsed "$t")"
echo "== ckptctl list demo"
"$bin/tools/ckptctl/ckptctl" --socket="$work/ckptd.sock" list demo
t=$(now)
echo "== ckptctl verify demo latest"
"$bin/tools/ckptctl/ckptctl" --socket="$work/ckptd.sock" verify demo latest
echo "   verify: $(elapsed "$t")"
echo "== ckptctl status"
"$bin/tools/ckptctl/ckptctl" --socket="$work/ckptd.sock" status

# Many hosts.
cluster="$work/cluster"
ctl() { "$bin/tools/ckptctl/ckptctl" --socket="$cluster/$1/ckptd.sock" "${@:2}"; }
counter() {  # HOST FIELD: a number from ckptctl status --json
  ctl "$1" status --json | python3 -c 'import json, sys; print(int(json.load(sys.stdin)[sys.argv[1]]))' "$2"
}
spread() {  # MODE STEP TP PP PER_HOST...: ranks over the hosts, as many on host I as given
  local mode="$1" step="$2" tp="$3" pp="$4" per=("${@:5}") world=0 rank=0 pids=() n h l
  for n in "${per[@]}"; do world=$((world + n)); done
  for h in "${!per[@]}"; do
    for ((l = 0; l < per[h]; l++, rank++)); do
      "$bin/tools/demo/ckpt-demo-rank" --socket="$cluster/h$h/ckptd.sock" --job=multi \
        --mode="$mode" --rank=$rank --world=$world --local_world="${per[h]}" --local_rank=$l \
        --step="$step" --scale="$multi_scale" --saved_world=8 --layout=parallel --tp="$tp" \
        --pp="$pp" | sed "s/^/   h$h: /" &
      pids+=($!)
    done
  done
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  return $failed
}
multi_scale=$(( scale / 2 > 0 ? scale / 2 : 1 ))
echo "== many hosts: a coordinator and 3 node daemons sharing one storage root"
CKPTD="$PWD/$bin/daemon/ckptd" CKPTCTL="$PWD/$bin/tools/ckptctl/ckptctl" \
  tools/dev/cluster.sh up "$cluster" 3 | sed 's/^/  /'
for h in h0 h1 h2; do
  until ctl coord cluster --json | grep -q "\"$h\""; do sleep 0.05; done
done
declare -A written read sent
for h in h0 h1 h2; do
  written[$h]=$(counter $h storage_bytes_written)
  read[$h]=$(counter $h chunk_bytes_read)
  sent[$h]=$(counter $h peer_bytes_sent)
done
t=$(now)
echo "== 8 ranks on 3 hosts (3+3+2), a transformer as TP=2 x PP=2 x DP=2, save step 200"
echo "   (weights replicated over DP: written once; optimizer state in FSDP flat ranges)"
spread save 200 2 2 3 3 2
echo "   save: $(elapsed "$t")"
unique=$(ctl coord list multi --json | python3 -c 'import json, sys; print(int(json.load(sys.stdin)["checkpoints"][0]["bytes"]))')
for h in h0 h1 h2; do
  echo "   $h wrote $(( $(counter $h storage_bytes_written) - written[$h] )) bytes"
done
echo "   the checkpoint holds $unique bytes"
t=$(now)
echo "== 6 ranks on 2 hosts (3+3) load it as TP=3 x DP=2"
spread load -1 3 1 3 3
echo "   load: $(elapsed "$t")"
total=0
for h in h0 h1; do
  r=$(( $(counter $h chunk_bytes_read) - read[$h] ))
  total=$((total + r))
  echo "   $h read $r bytes from storage, forwarded $(( $(counter $h peer_bytes_sent) - sent[$h] )) to the other host"
done
echo "   read $total of the checkpoint's $unique bytes: each chunk the load needs, once, by one host"
echo "== ckptctl cluster"
ctl coord cluster | sed 's/^/  /'
tools/dev/cluster.sh down "$cluster" >/dev/null
echo "demo: OK, every byte loaded under the new sharding matched what was saved"
echo "      (on one host, and across hosts)"
