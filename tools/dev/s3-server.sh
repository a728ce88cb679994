#!/usr/bin/env bash
# Starts a real S3 server for tests and benchmarks: OpenStack Swift (Debian's
# swift-* packages) with its s3api middleware, one replica, all four servers
# on loopback, everything (configuration, rings, object data, logs) under one
# directory.
#
#   tools/dev/s3-server.sh start DIR [PORT]   prints "endpoint=http://127.0.0.1:PORT"
#                                             once the proxy answers S3 requests
#   tools/dev/s3-server.sh stop DIR           stops what start started there
#
# S3_BIND_IP=ADDR serves S3 on ADDR instead of 127.0.0.1 (the namespaced
# cluster test's hosts reach it on their bridge's address); the storage
# servers behind it stay on loopback.
#
# S3 credentials: access key "ckpt:tester", secret "ckpt-secret" (tempauth),
# region us-east-1, path-style addressing. Swift reads its hash salt from
# /etc/swift/swift.conf (Debian ships one); nothing else outside DIR is used.
set -euo pipefail

cmd="${1:-}"
dir="${2:-}"
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR [PORT]" >&2
  exit 2
fi

stop() {
  local pidfile
  for pidfile in "$dir"/run/*.pid; do
    [ -f "$pidfile" ] || continue
    kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for pidfile in "$dir"/run/*.pid; do
    [ -f "$pidfile" ] || continue
    local pid
    pid="$(cat "$pidfile")"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
if [ "$cmd" != start ]; then
  echo "$0: unknown command $cmd" >&2
  exit 2
fi
for bin in swift-proxy-server swift-object-server swift-container-server swift-account-server \
  swift-ring-builder memcached; do
  command -v "$bin" >/dev/null || { echo "$0: $bin missing (tools/dev/install-deps.sh)" >&2; exit 1; }
done
[ -f /etc/swift/swift.conf ] || { echo "$0: /etc/swift/swift.conf missing (Debian's swift package)" >&2; exit 1; }

mkdir -p "$dir"/{conf,srv/d1,run,log}
dir="$(cd "$dir" && pwd)"
proxy_port="${3:-$(free_port)}"
object_port="$(free_port)"
container_port="$(free_port)"
account_port="$(free_port)"
memcache_port="$(free_port)"

# One device, one replica, 2^6 partitions: rings for a single-disk cluster.
for ring in object container account; do
  port_var="${ring}_port"
  (
    cd "$dir/conf"
    rm -f "$ring.builder" "$ring.ring.gz"
    swift-ring-builder "$ring.builder" create 6 1 1 >/dev/null
    swift-ring-builder "$ring.builder" add "r1z1-127.0.0.1:${!port_var}/d1" 1 >/dev/null
    swift-ring-builder "$ring.builder" rebalance >/dev/null 2>&1 || true
  )
done

# user: Swift drops to the user "swift" by default, which cannot read a
# directory private to whoever started it.
common="[DEFAULT]
user = $(id -un)
swift_dir = $dir/conf
devices = $dir/srv
mount_check = false
log_facility = LOG_LOCAL0
log_level = WARNING
log_address = /nonexistent
"
# The object server, which hashes and writes every byte, gets a process per
# core; all of them move data in 1 MiB pieces rather than Swift's 64 KiB,
# which costs its Python a loop turn per piece (a third more throughput for
# every client here).
for server in object container account; do
  port_var="${server}_port"
  cat > "$dir/conf/$server-server.conf" <<CONF
$common
bind_port = ${!port_var}
bind_ip = 127.0.0.1
workers = $([ "$server" = object ] && echo 2 || echo 0)
network_chunk_size = 1048576
disk_chunk_size = 1048576

[pipeline:main]
pipeline = $server-server

[app:$server-server]
use = egg:swift#$server
CONF
done
# Two proxy workers: the two cores of the test machines. s3api's limits are
# Swift's defaults (1,000 parts, 5 MiB minimum part, 5 GiB per part), which
# the client probes rather than assumes.
cat > "$dir/conf/proxy-server.conf" <<CONF
$common
bind_port = $proxy_port
bind_ip = ${S3_BIND_IP:-127.0.0.1}
workers = 2
client_chunk_size = 1048576
object_chunk_size = 1048576

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats bulk s3api tempauth copy slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true

[filter:s3api]
use = egg:swift#s3api
location = us-east-1

[filter:tempauth]
use = egg:swift#tempauth
user_ckpt_tester = ckpt-secret .admin

[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$memcache_port
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:bulk]
use = egg:swift#bulk
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
CONF

start_server() {
  local name="$1"
  # Debian's python, whatever python3 the PATH holds (Swift's modules live there).
  ${S3_STRACE:+strace -f -o $dir/log/$name.strace} /usr/bin/python3 "$(command -v "swift-$name-server")" "$dir/conf/$name-server.conf" \
    >"$dir/log/$name.log" 2>&1 &
  echo $! > "$dir/run/$name.pid"
}
# memcached holds the proxy's account and container lookups, as in any
# Swift deployment: without it every request asks the account and
# container servers again.
memcached -l 127.0.0.1 -p "$memcache_port" -U 0 -m 64 -u "$(id -un)" \
  >"$dir/log/memcached.log" 2>&1 &
echo $! > "$dir/run/memcached.pid"
for server in account container object proxy; do start_server "$server"; done

# Ready when the proxy answers /healthcheck and a signed-less S3 request gets
# an S3 error document (the middleware is loaded).
for _ in $(seq 300); do
  if curl -fsS "http://${S3_BIND_IP:-127.0.0.1}:$proxy_port/healthcheck" >/dev/null 2>&1; then
    echo "endpoint=http://${S3_BIND_IP:-127.0.0.1}:$proxy_port"
    exit 0
  fi
  for server in account container object proxy; do
    if ! kill -0 "$(cat "$dir/run/$server.pid")" 2>/dev/null; then
      echo "$0: swift-$server-server exited:" >&2
      tail -20 "$dir/log/$server.log" >&2
      stop
      exit 1
    fi
  done
  sleep 0.1
done
echo "$0: the proxy did not answer within 30 s" >&2
stop
exit 1
