#!/usr/bin/env bash
# A ckpt cluster on one machine, for tests and the demo: a coordinator
# ckptd and K node ckptds, each "host" in its own network namespace with its
# own address on a bridge (iproute2: ip netns, veth), all sharing one
# storage directory (the shared file system case). Needs root; with
# --loopback (or without root) every daemon listens on its own port of
# 127.0.0.1 instead, and `cut` is not available.
#
#   tools/dev/cluster.sh up DIR K [--loopback]   start; prints the hosts
#   tools/dev/cluster.sh status DIR              ckptctl cluster at the coordinator
#   tools/dev/cluster.sh kill DIR I|coord        SIGKILL host I's (or the coordinator's) daemon
#   tools/dev/cluster.sh start DIR I|coord [FLAGS...]  start it again (with FLAGS)
#   tools/dev/cluster.sh cut DIR I               take host I's link down
#   tools/dev/cluster.sh heal DIR I              bring it back up
#   tools/dev/cluster.sh down DIR                stop everything, remove namespaces and links
#
# Under DIR: root/ (the storage), tls/ (certificate, key, tokens),
# coord/ and h<I>/ (each daemon's socket, log and pid), cluster.env.
# Host I's ranks attach to DIR/h<I>/ckptd.sock. CKPTD and CKPTCTL name the
# binaries (default: build/); CKPT_CLUSTER_FLAGS adds flags to every daemon.
set -euo pipefail
cd "$(dirname "$0")/../.."
ckptd="${CKPTD:-$PWD/build/daemon/ckptd}"
ckptctl="${CKPTCTL:-$PWD/build/tools/ckptctl/ckptctl}"
command="${1:?usage: cluster.sh up|status|kill|start|cut|heal|down DIR ...}"
dir="${2:?usage: cluster.sh $command DIR ...}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
env_file="$dir/cluster.env"

die() { echo "cluster: $*" >&2; exit 1; }

# Names and addresses: namespaces ckpt-<tag>-coord and ckpt-<tag>-h<I> on
# bridge ckbr<tag> (10.233.<net>.1), the coordinator at .2, host I at .(10+I).
address_of() {  # NAME (coord or hI) -> ip:port
  local n="$1" last
  if [ "$mode" = loopback ]; then
    [ "$n" = coord ] && last=0 || last=$((1 + ${n#h}))
    echo "127.0.0.1:$((base_port + last))"
  else
    [ "$n" = coord ] && last=2 || last=$((10 + ${n#h}))
    echo "10.233.$net.$last:7470"
  fi
}
ns_prefix() {  # NAME: the words that run a command in that host's namespace
  [ "$mode" = loopback ] || echo "ip netns exec ckpt-$tag-$1"
}

start_daemon() {  # NAME [EXTRA FLAGS...]
  local n="$1" flags
  mkdir -p "$dir/$n"
  flags=(--storage_root="$dir/root" --socket_path="$dir/$n/ckptd.sock"
         --listen_address="$(address_of "$n")" --host_name="$n"
         --tls_cert_file="$dir/tls/cert.pem" --tls_key_file="$dir/tls/key.pem"
         --token_file="$dir/tls/admin.token" --read_token_file="$dir/tls/read.token"
         --pool_bytes=$((128 << 20)) --writer_threads=2 --reader_threads=2
         --heartbeat_interval_s="$interval" --heartbeat_timeout_s="$timeout")
  if [ "$n" = coord ]; then
    flags+=(--coordinator)
  else
    flags+=(--peer_address="$(address_of "$n" | cut -d: -f1):0"
            --coordinator_address="$(address_of coord)"
            --coordinator_tls_ca_file="$dir/tls/cert.pem"
            --coordinator_token_file="$dir/tls/admin.token"
            --failure_domain="rack$(( ${n#h} % 2 ))")
  fi
  # CKPT_CLUSTER_FLAGS: more flags for every daemon (e.g. --memory_tier_bytes=N).
  # shellcheck disable=SC2206
  flags+=(${CKPT_CLUSTER_FLAGS:-} "${@:2}")
  rm -f "$dir/$n/log"
  # Not through a function: $! must be the daemon itself (ip netns exec
  # execs it in place), so that kill reaches it.
  # shellcheck disable=SC2046
  $(ns_prefix "$n") "$ckptd" "${flags[@]}" >"$dir/$n/log" 2>&1 &
  echo $! >"$dir/$n/pid"
  # Serving, or dead: the log says which.
  for _ in $(seq 1 300); do
    grep -q "ckptd: serving" "$dir/$n/log" && return 0
    kill -0 "$(cat "$dir/$n/pid")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir/$n/log" >&2
  die "$n: ckptd did not start"
}

make_tls() {
  mkdir -p "$dir/tls"
  chmod 700 "$dir/tls"
  local sans="IP:127.0.0.1" i
  for ((i = 0; i < hosts; i++)); do sans+=",IP:10.233.$net.$((10 + i))"; done
  sans+=",IP:10.233.$net.2"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$dir/tls/key.pem" -out "$dir/tls/cert.pem" -subj "/CN=ckpt-cluster" \
    -addext "subjectAltName=$sans" 2>/dev/null
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/tls/admin.token"
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/tls/read.token"
  chmod 600 "$dir/tls/"*
}

up() {
  hosts="${3:?usage: cluster.sh up DIR K [--loopback]}"
  mode=netns
  if [ "${4:-}" = "--loopback" ] || [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
    mode=loopback
  fi
  [ -e "$env_file" ] && die "$dir already holds a cluster (cluster.sh down $dir first)"
  # A tag no other cluster on this machine holds: claimed by creating its
  # bridge (the subnet goes with the tag), so concurrent runs never share
  # or tear down each other's links.
  local claimed=0
  for _ in $(seq 1 50); do
    tag=$(( RANDOM % 250 + 1 )); net=$tag; base_port=$(( 21000 + (RANDOM % 400) * 20 ))
    if [ "$mode" = loopback ] || ip link add "ckbr$tag" type bridge 2>/dev/null; then
      claimed=1
      break
    fi
  done
  [ "$claimed" = 1 ] || die "no free bridge name ckbr1..250"
  interval="${CKPT_CLUSTER_HEARTBEAT_S:-0.25}"; timeout="${CKPT_CLUSTER_TIMEOUT_S:-2}"
  printf 'mode=%s\nhosts=%s\ntag=%s\nnet=%s\nbase_port=%s\ninterval=%s\ntimeout=%s\n' \
    "$mode" "$hosts" "$tag" "$net" "$base_port" "$interval" "$timeout" >"$env_file"
  # A start that fails half-way leaves nothing behind.
  trap '[ "${up_done:-0}" = 1 ] || down >/dev/null 2>&1 || true' EXIT
  mkdir -p "$dir/root"
  make_tls
  if [ "$mode" = netns ]; then
    ip addr add "10.233.$net.1/24" dev "ckbr$tag"
    ip link set "ckbr$tag" up
    local n
    for n in coord $(seq -f 'h%g' 0 $((hosts - 1))); do
      ip netns add "ckpt-$tag-$n"
      ip link add "ck$tag$n" type veth peer name eth0 netns "ckpt-$tag-$n"
      ip link set "ck$tag$n" master "ckbr$tag" up
      ip -n "ckpt-$tag-$n" addr add "$(address_of "$n" | cut -d: -f1)/24" dev eth0
      ip -n "ckpt-$tag-$n" link set eth0 up
      ip -n "ckpt-$tag-$n" link set lo up
    done
  fi
  start_daemon coord
  local i
  for ((i = 0; i < hosts; i++)); do start_daemon "h$i"; done
  up_done=1
  echo "cluster: $hosts hosts and a coordinator ($mode) under $dir"
  echo "  coordinator $(address_of coord), socket $dir/coord/ckptd.sock"
  for ((i = 0; i < hosts; i++)); do echo "  h$i $(address_of "h$i"), socket $dir/h$i/ckptd.sock"; done
}

load_env() {
  [ -e "$env_file" ] || die "no cluster under $dir"
  # shellcheck disable=SC1090
  source "$env_file"
}

stop_daemon() {  # NAME SIGNAL
  local pidfile="$dir/$1/pid"
  [ -e "$pidfile" ] || return 0
  local pid
  pid="$(cat "$pidfile")"
  rm -f "$pidfile"
  # Only our daemon: the pid may have been reused since.
  grep -q "socket_path=$dir/$1/ckptd.sock" "/proc/$pid/cmdline" 2>/dev/null || return 0
  kill "-$2" "$pid" 2>/dev/null || true
  # Gone, or a zombie (its parent, the shell of `up`, has exited and
  # nothing may reap it soon): either way no longer running. A loaded
  # machine may take seconds to tear a killed daemon down; a start before
  # it is gone finds its socket still served. A zombie leader whose other
  # threads still exit ("Zl") holds its sockets until the last one goes.
  for _ in $(seq 1 600); do
    case "$(ps -o stat= -p "$pid" 2>/dev/null)" in "" | Z | "Z+") break ;; esac
    sleep 0.05
  done
}

down() {
  load_env
  local n
  for n in coord $(seq -f 'h%g' 0 $((hosts - 1))); do stop_daemon "$n" KILL; done
  if [ "$mode" = netns ]; then
    for n in coord $(seq -f 'h%g' 0 $((hosts - 1))); do ip netns del "ckpt-$tag-$n" 2>/dev/null || true; done
    ip link del "ckbr$tag" 2>/dev/null || true
  fi
  rm -f "$env_file"
  echo "cluster: down"
}

host_arg() {  # I, or coord (kill and start only)
  local i="${3:?usage: cluster.sh $command DIR I}"
  if [ "$i" = coord ] && [ "$command" != cut ] && [ "$command" != heal ]; then
    echo coord
    return
  fi
  [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -lt "$hosts" ] || die "no host $i (0..$((hosts - 1)))"
  echo "h$i"
}

case "$command" in
  up) up "$@" ;;
  down) down ;;
  status) load_env; "$ckptctl" --socket "$dir/coord/ckptd.sock" cluster "${@:3}" ;;
  kill) load_env; stop_daemon "$(host_arg "$@")" KILL ;;
  start) load_env; start_daemon "$(host_arg "$@")" "${@:4}" ;;
  cut | heal)
    load_env
    [ "$mode" = netns ] || die "$command needs network namespaces (root)"
    n="$(host_arg "$@")"
    ip link set "ck$tag$n" "$([ "$command" = cut ] && echo down || echo up)"
    ;;
  *) die "unknown command $command" ;;
esac
