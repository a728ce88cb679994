#!/usr/bin/env bash
# The external check of ckpt-bench's disk figures: fio (Debian's package) on
# the same directory, io_uring, O_DIRECT, 4 MiB blocks, queue depth 16,
# fsync at the end of the write; sequential write then read, then one job
# per writer thread. Prints GB/s (1e9 bytes per second).
#
#   tools/bench/fio-baseline.sh DIR [GiB] [jobs]
set -euo pipefail
dir="${1:?usage: fio-baseline.sh DIR [GiB] [jobs]}"
gib="${2:-2}"
jobs="${3:-4}"
command -v fio >/dev/null || { echo "fio-baseline: fio is not installed (apt-get install fio)" >&2; exit 2; }
work="$dir/fio-baseline-$$"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

# fio's terse format v3: field 7 is read bandwidth, field 48 write bandwidth (KiB/s).
run() {  # name rw numjobs
  local size=$((gib * 1024 / $3))
  fio --name="$1" --directory="$work" --ioengine=io_uring --direct=1 --bs=4m --iodepth=16 \
      --rw="$2" --numjobs="$3" --size="${size}m" --end_fsync=1 --group_reporting \
      --output-format=terse | awk -F';' -v n="$1" -v rw="$2" \
      '{ kib = (rw == "read") ? $7 : $48; printf "%-16s %6.3f GB/s\n", n, kib * 1024 / 1e9 }'
}
run write_1job write 1
run read_1job read 1
rm -f "$work"/*
run "write_${jobs}jobs" write "$jobs"
run "read_${jobs}jobs" read "$jobs"
