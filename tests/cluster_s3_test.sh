#!/usr/bin/env bash
# A job spread over three namespaced hosts saving into one S3 bucket, with
# no shared directory (issue "Object stores"): the coordinator and every
# node ckptd take --storage_root=s3://BUCKET/root, the S3 server (Swift
# s3api, tools/dev/s3-server.sh) listens on the hosts' bridge. Each check
# can fail:
#  - 6 ranks (2 per host) save two steps; each host uploaded its own data
#    files into the step's directory (an object per host's writer), and the
#    coordinator's COMMIT names it;
#  - 3 ranks on other hosts load the steps back resharded, every byte
#    checked by the ranks; `ckptctl verify` at the coordinator passes;
#  - no host's storage directory holds anything (nothing local), and no
#    multipart upload is left.
# Needs network namespaces (root): exits 77 (skipped) without them.
#   tests/cluster_s3_test.sh CKPTD CKPTCTL DEMO_RANK
set -euo pipefail
test_name=cluster_s3_test
source "$(dirname "$0")/cluster_test_lib.sh"
repo="$(cd "$(dirname "$0")/.." && pwd)"
trap '"$repo/tools/dev/s3-server.sh" stop "$dir/s3" >/dev/null 2>&1 || true
      "$cluster" down "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

"$cluster" up "$dir" 3 >/dev/null
net="$(sed -n 's/^net=//p' "$dir/cluster.env")"
S3_BIND_IP="10.233.$net.1" "$repo/tools/dev/s3-server.sh" start "$dir/s3" >"$dir/s3.out" ||
  fail "the S3 server did not start: $(cat "$dir/s3.out")"
endpoint="$(sed -n 's/^endpoint=//p' "$dir/s3.out")"
bucket="ckpt-cluster-$$"
printf '[default]\naws_access_key_id = ckpt:tester\naws_secret_access_key = ckpt-secret\n' \
  >"$dir/s3-credentials"
chmod 600 "$dir/s3-credentials"
# boto3 (requirements.txt): an independent client, to make the bucket and
# to look at what ckpt left in it.
s3() {
  AWS_ACCESS_KEY_ID=ckpt:tester AWS_SECRET_ACCESS_KEY=ckpt-secret \
    "$repo/.venv/bin/python" - "$endpoint" "$bucket" "$@" <<'PY'
import sys, boto3
from botocore.config import Config
endpoint, bucket, what = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
if what == "mb":
    s3.create_bucket(Bucket=bucket)
elif what == "keys":
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            print(o["Key"])
elif what == "uploads":
    print(len(s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])))
elif what == "get":
    sys.stdout.write(s3.get_object(Bucket=bucket, Key=sys.argv[4])["Body"].read().decode())
PY
}
s3 mb
# Every daemon again, on the bucket: all stopped first, so the new
# coordinator meets only new hosts.
for n in 0 1 2 coord; do "$cluster" kill "$dir" "$n" >/dev/null; done
for n in coord 0 1 2; do
  "$cluster" start "$dir" "$n" --storage_root="s3://$bucket/root" --s3_endpoint="$endpoint" \
    --s3_credentials_file="$dir/s3-credentials" --s3_part_bytes=5242880 >/dev/null
done
for n in h0 h1 h2; do await_line "$dir/$n/log" "registered with coordinator"; done
await_alive
rm -rf "$dir/root"

# ranks MODE STEP WORLD [FLAGS...]: WORLD ranks over the hosts in turn.
ranks() {
  local mode="$1" step="$2" world="$3" rank host
  shift 3
  rm -f "$dir"/ranks/*
  for ((rank = 0; rank < world; rank++)); do
    host=$((rank * 3 / world))
    ( set +e
      "$demo_rank" --socket="$dir/h$host/ckptd.sock" --job=spread --mode="$mode" --step="$step" \
        --rank=$rank --world="$world" --local_world=$((world / 3)) \
        --local_rank=$((rank % (world / 3))) --scale=4 "$@" >"$dir/ranks/$rank.out" 2>&1
      echo $? >"$dir/ranks/$rank.rc" ) &
  done
  wait
  for ((rank = 0; rank < world; rank++)); do
    [ "$(cat "$dir/ranks/$rank.rc")" = 0 ] || fail "$mode rank $rank: $(cat "$dir/ranks/$rank.out")"
  done
}

ranks save 1 6
ranks save 2 6
keys="$(s3 keys)"
for step in 1 2; do
  commit="$(s3 get "root/spread/step-$step/COMMIT")" || fail "step $step has no COMMIT"
  partial="$(echo "$commit" | sed -n 's/^dir //p')"
  [ -n "$partial" ] || fail "step $step: COMMIT names no directory: $commit"
  grep -q "^root/spread/$partial/MANIFEST$" <<<"$keys" || fail "step $step: no MANIFEST in $partial"
  for host in h0 h1 h2; do
    grep -q "^root/spread/$partial/data/$host-" <<<"$keys" ||
      fail "step $step: no data file of $host in $partial: $(grep "$partial" <<<"$keys")"
  done
done

# Three ranks, one per host, load what six saved: every byte checked.
ranks load 2 3 --saved_world=6
grep -q "loaded step 2:" "$dir/ranks/0.out" || fail "rank 0 did not load step 2: $(cat "$dir/ranks/0.out")"
ranks load 1 3 --saved_world=6
"$CKPTCTL" --socket "$dir/coord/ckptd.sock" verify spread 2 >"$dir/verify.out" 2>&1 ||
  fail "verify: $(cat "$dir/verify.out")"
[ "$(s3 uploads)" = 0 ] || fail "multipart uploads left: $(s3 uploads)"
[ ! -e "$dir/root" ] || fail "a host wrote under the local directory: $(find "$dir/root" | head)"
echo "$test_name: ok"
