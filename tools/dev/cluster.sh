#!/usr/bin/env bash
# A ckpt cluster on one machine, for tests and the demo: a coordinator
# ckptd and K node ckptds, each "host" in its own network namespace with its
# own address on a bridge (iproute2: ip netns, veth), all sharing one
# storage directory (the shared file system case). Needs root; with
# --loopback (or without root) every daemon listens on its own port of
# 127.0.0.1 instead, and `cut` is not available.
#
#   tools/dev/cluster.sh up DIR K [--loopback]   start; prints the hosts
#   tools/dev/cluster.sh status DIR [cJ]         ckptctl cluster at the coordinator (or cJ)
#   tools/dev/cluster.sh kill DIR NAME           SIGKILL a daemon: host I, coord, cJ or eJ
#   tools/dev/cluster.sh start DIR NAME [FLAGS...]  start it again (with FLAGS)
#   tools/dev/cluster.sh stop DIR NAME           SIGSTOP it (paused, sockets open)
#   tools/dev/cluster.sh cont DIR NAME           SIGCONT it
#   tools/dev/cluster.sh cut DIR NAME            take its link down (host I, cJ or eJ)
#   tools/dev/cluster.sh heal DIR NAME           bring it back up
#   tools/dev/cluster.sh leader DIR              the coordinator that leads (cJ), from etcd
#   tools/dev/cluster.sh down DIR                stop everything, remove namespaces and links
#
# With CKPT_CLUSTER_ETCD=M (1 or 3) the cluster has no single coordinator:
# M etcd members e0.. and CKPT_CLUSTER_COORDINATORS (3) coordinators c0..,
# each in its own namespace, elect their leader through etcd
# (docs/failover.md), and the nodes follow it (--etcd_endpoints).
#
# Under DIR: root/ (the storage), tls/ (certificate, key, tokens),
# coord/ (or c<J>/, e<J>/) and h<I>/ (each daemon's socket, log and pid),
# cluster.env. Host I's ranks attach to DIR/h<I>/ckptd.sock. CKPTD and
# CKPTCTL name the binaries (default: build/); CKPT_CLUSTER_FLAGS adds flags
# to every ckptd, CKPT_CLUSTER_COORDINATOR_FLAGS to the coordinators'.
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

# Names and addresses: namespaces ckpt-<tag>-<NAME> on bridge ckbr<tag>
# (10.233.<net>.1): the coordinator at .2, host I at .(10+I), coordinator
# cJ at .(20+J), etcd member eJ at .(30+J) (client port 2379, peers 2380).
# On loopback each takes ports of base_port..base_port+19.
address_of() {  # NAME (coord, hI, cJ or eJ) -> ip:port
  local n="$1" last
  if [ "$mode" = loopback ]; then
    case "$n" in
      coord) last=0 ;;
      h*) last=$((1 + ${n#h})) ;;
      c*) last=$((11 + ${n#c})) ;;
      e*) last=$((14 + ${n#e})) ;;
    esac
    echo "127.0.0.1:$((base_port + last))"
  else
    case "$n" in
      coord) echo "10.233.$net.2:7470" ;;
      h*) echo "10.233.$net.$((10 + ${n#h})):7470" ;;
      c*) echo "10.233.$net.$((20 + ${n#c})):7470" ;;
      e*) echo "10.233.$net.$((30 + ${n#e})):2379" ;;
    esac
  fi
}
etcd_peer_of() {  # eJ -> ip:port of its peer listener
  local a
  a="$(address_of "$1")"
  if [ "$mode" = loopback ]; then echo "127.0.0.1:$(( ${a##*:} + 3 ))"; else echo "${a%:*}:2380"; fi
}
etcd_endpoints() {
  local j out=""
  for ((j = 0; j < etcd; j++)); do out+="${out:+,}$(address_of "e$j")"; done
  echo "$out"
}
# Every daemon's name, coordinators first.
names() {
  local j
  if [ "$etcd" -gt 0 ]; then
    for ((j = 0; j < etcd; j++)); do echo "e$j"; done
    for ((j = 0; j < coordinators; j++)); do echo "c$j"; done
  else
    echo coord
  fi
  seq -f 'h%g' 0 $((hosts - 1))
}

start_etcd() {  # eJ: an etcd member (the cluster's first start, or a restart)
  local n="$1" j cluster="" state=new
  mkdir -p "$dir/$n"
  for ((j = 0; j < etcd; j++)); do cluster+="${cluster:+,}e$j=http://$(etcd_peer_of "e$j")"; done
  [ -d "$dir/$n/data/member" ] && state=existing
  rm -f "$dir/$n/log"
  # shellcheck disable=SC2046
  $(ns_prefix "$n") /usr/bin/etcd --name="$n" --data-dir="$dir/$n/data" \
    --listen-client-urls="http://$(address_of "$n")" \
    --advertise-client-urls="http://$(address_of "$n")" \
    --listen-peer-urls="http://$(etcd_peer_of "$n")" \
    --initial-advertise-peer-urls="http://$(etcd_peer_of "$n")" \
    --initial-cluster="$cluster" --initial-cluster-state="$state" \
    --initial-cluster-token="ckpt-$tag" \
    --heartbeat-interval=100 --election-timeout=1000 >"$dir/$n/log" 2>&1 &
  echo $! >"$dir/$n/pid"
}
await_etcd() {  # eJ: until it serves (with a quorum)
  for _ in $(seq 1 300); do
    grep -q "ready to serve client requests" "$dir/$1/log" && return 0
    kill -0 "$(cat "$dir/$1/pid")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir/$1/log" >&2
  die "$1: etcd did not start"
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
  elif [[ "$n" == c* ]]; then
    # shellcheck disable=SC2206
    flags+=(--coordinator --etcd_endpoints="$(etcd_endpoints)"
            --etcd_election="/ckpt/$tag" ${CKPT_CLUSTER_COORDINATOR_FLAGS:-})
  else
    flags+=(--peer_address="$(address_of "$n" | cut -d: -f1):0"
            --coordinator_tls_ca_file="$dir/tls/cert.pem"
            --coordinator_token_file="$dir/tls/admin.token"
            --failure_domain="rack$(( ${n#h} % 2 ))")
    if [ "$etcd" -gt 0 ]; then
      flags+=(--etcd_endpoints="$(etcd_endpoints)" --etcd_election="/ckpt/$tag")
    else
      flags+=(--coordinator_address="$(address_of coord)")
    fi
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
  sans+=",IP:10.233.$net.2,IP:10.233.$net.20,IP:10.233.$net.21,IP:10.233.$net.22"
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
  etcd="${CKPT_CLUSTER_ETCD:-0}"; coordinators="${CKPT_CLUSTER_COORDINATORS:-3}"
  [ "$etcd" -gt 0 ] || coordinators=0
  # The address plan (address_of): hosts .10-.19, coordinators .20-.22
  # (the certificate's names), etcd members .30-.32.
  [ "$hosts" -le 10 ] && [ "$coordinators" -le 3 ] && [ "$etcd" -le 3 ] ||
    die "at most 10 hosts, 3 coordinators and 3 etcd members"
  printf 'mode=%s\nhosts=%s\ntag=%s\nnet=%s\nbase_port=%s\ninterval=%s\ntimeout=%s\netcd=%s\ncoordinators=%s\n' \
    "$mode" "$hosts" "$tag" "$net" "$base_port" "$interval" "$timeout" "$etcd" \
    "$coordinators" >"$env_file"
  # A start that fails half-way leaves nothing behind.
  trap '[ "${up_done:-0}" = 1 ] || down >/dev/null 2>&1 || true' EXIT
  mkdir -p "$dir/root"
  make_tls
  if [ "$mode" = netns ]; then
    ip addr add "10.233.$net.1/24" dev "ckbr$tag"
    ip link set "ckbr$tag" up
    local n
    for n in $(names); do
      ip netns add "ckpt-$tag-$n"
      ip link add "ck$tag$n" type veth peer name eth0 netns "ckpt-$tag-$n"
      ip link set "ck$tag$n" master "ckbr$tag" up
      ip -n "ckpt-$tag-$n" addr add "$(address_of "$n" | cut -d: -f1)/24" dev eth0
      ip -n "ckpt-$tag-$n" link set eth0 up
      ip -n "ckpt-$tag-$n" link set lo up
    done
  fi
  local i
  if [ "$etcd" -gt 0 ]; then
    for ((i = 0; i < etcd; i++)); do start_etcd "e$i"; done
    for ((i = 0; i < etcd; i++)); do await_etcd "e$i"; done
    for ((i = 0; i < coordinators; i++)); do start_daemon "c$i"; done
  else
    start_daemon coord
  fi
  for ((i = 0; i < hosts; i++)); do start_daemon "h$i"; done
  up_done=1
  if [ "$etcd" -gt 0 ]; then
    echo "cluster: $hosts hosts, $coordinators coordinators and $etcd etcd members ($mode) under $dir"
    for ((i = 0; i < coordinators; i++)); do echo "  c$i $(address_of "c$i"), socket $dir/c$i/ckptd.sock"; done
    for ((i = 0; i < etcd; i++)); do echo "  e$i $(address_of "e$i")"; done
  else
    echo "cluster: $hosts hosts and a coordinator ($mode) under $dir"
    echo "  coordinator $(address_of coord), socket $dir/coord/ckptd.sock"
  fi
  for ((i = 0; i < hosts; i++)); do echo "  h$i $(address_of "h$i"), socket $dir/h$i/ckptd.sock"; done
}

load_env() {
  [ -e "$env_file" ] || die "no cluster under $dir"
  # shellcheck disable=SC1090
  source "$env_file"
  etcd="${etcd:-0}"; coordinators="${coordinators:-0}"
}

stop_daemon() {  # NAME SIGNAL
  local pidfile="$dir/$1/pid"
  [ -e "$pidfile" ] || return 0
  local pid
  pid="$(cat "$pidfile")"
  rm -f "$pidfile"
  # Only our daemon: the pid may have been reused since.
  grep -q -e "socket_path=$dir/$1/ckptd.sock" -e "data-dir=$dir/$1/data" "/proc/$pid/cmdline" \
    2>/dev/null || return 0
  # A paused process cannot die until it runs again.
  kill -CONT "$pid" 2>/dev/null || true
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
  for n in $(names); do stop_daemon "$n" KILL; done
  if [ "$mode" = netns ]; then
    for n in $(names); do ip netns del "ckpt-$tag-$n" 2>/dev/null || true; done
    ip link del "ckbr$tag" 2>/dev/null || true
  fi
  rm -f "$env_file"
  echo "cluster: down"
}

host_arg() {  # I, coord, cJ or eJ
  local i="${3:?usage: cluster.sh $command DIR NAME}"
  if [ "$i" = coord ] && [ "$etcd" -eq 0 ]; then
    [ "$command" != cut ] && [ "$command" != heal ] || die "the coordinator's link is the bridge's"
    echo coord
    return
  fi
  if [[ "$i" =~ ^c[0-9]+$ ]] && [ "${i#c}" -lt "$coordinators" ]; then echo "$i"; return; fi
  if [[ "$i" =~ ^e[0-9]+$ ]] && [ "${i#e}" -lt "$etcd" ]; then echo "$i"; return; fi
  [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -lt "$hosts" ] || die "no host $i (0..$((hosts - 1)))"
  echo "h$i"
}

# The coordinator etcd names leader (cJ), or nothing.
leader() {
  local j out
  for ((j = 0; j < coordinators; j++)); do
    [ -e "$dir/c$j/pid" ] || continue
    # Briefly: a paused coordinator never answers.
    out="$("$ckptctl" --socket "$dir/c$j/ckptd.sock" --timeout 2 cluster --json 2>/dev/null)" ||
      continue
    local address
    address="$(python3 -c '
import json, sys
print(json.loads(sys.argv[1]).get("election", {}).get("leader", ""))' "$out")"
    [ -n "$address" ] || continue
    for ((j = 0; j < coordinators; j++)); do
      [ "$(address_of "c$j")" = "$address" ] && { echo "c$j"; return 0; }
    done
  done
  return 1
}

case "$command" in
  up) up "$@" ;;
  down) down ;;
  status)
    load_env
    at=coord
    if [ "$etcd" -gt 0 ]; then
      at=c0
      [[ "${3:-}" =~ ^c[0-9]+$ ]] && { at="$3"; set -- "${@:1:2}" "${@:4}"; }
    fi
    "$ckptctl" --socket "$dir/$at/ckptd.sock" cluster "${@:3}"
    ;;
  kill) load_env; stop_daemon "$(host_arg "$@")" KILL ;;
  start)
    load_env
    n="$(host_arg "$@")"
    if [[ "$n" == e* ]]; then start_etcd "$n"; else start_daemon "$n" "${@:4}"; fi
    ;;
  stop | cont)
    load_env
    n="$(host_arg "$@")"
    pid="$(cat "$dir/$n/pid")"
    kill "-$([ "$command" = stop ] && echo STOP || echo CONT)" "$pid"
    ;;
  leader) load_env; leader ;;
  cut | heal)
    load_env
    [ "$mode" = netns ] || die "$command needs network namespaces (root)"
    n="$(host_arg "$@")"
    ip link set "ck$tag$n" "$([ "$command" = cut ] && echo down || echo up)"
    ;;
  *) die "unknown command $command" ;;
esac
