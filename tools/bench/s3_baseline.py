#!/usr/bin/env python3
"""The baselines of ckpt-bench --s3: the same bytes to and from the same S3
server with the common clients, tuned for throughput.

  s3_baseline.py boto3  ENDPOINT BUCKET FILE   boto3's transfer manager
  s3_baseline.py awscli ENDPOINT BUCKET FILE   `aws s3 cp` (Debian's awscli)

Keys come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Prints one line,
"put_s <seconds> get_s <seconds>", after checking the downloaded copy is
the file; exits 77 when the client is not installed.
"""
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time

PART = 16 << 20
CONCURRENCY = 16


def boto3_run(endpoint, bucket, path, out):
    try:
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config
    except ImportError:
        sys.exit(77)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"},
                                    max_pool_connections=CONCURRENCY * 2))
    config = TransferConfig(multipart_threshold=PART, multipart_chunksize=PART,
                            max_concurrency=CONCURRENCY, use_threads=True)
    start = time.monotonic()
    s3.upload_file(path, bucket, "baseline/boto3.bin", Config=config)
    put = time.monotonic() - start
    start = time.monotonic()
    s3.download_file(bucket, "baseline/boto3.bin", out, Config=config)
    get = time.monotonic() - start
    s3.delete_object(Bucket=bucket, Key="baseline/boto3.bin")
    return put, get


def awscli_run(endpoint, bucket, path, out):
    aws = shutil.which("aws", path="/usr/bin:/usr/local/bin")
    if aws is None:
        sys.exit(77)
    config = tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False)
    config.write("[default]\nregion = us-east-1\ns3 =\n"
                 "  max_concurrent_requests = %d\n  multipart_threshold = %dMB\n"
                 "  multipart_chunksize = %dMB\n  addressing_style = path\n"
                 % (CONCURRENCY, PART >> 20, PART >> 20))
    config.close()
    env = dict(os.environ, AWS_CONFIG_FILE=config.name)
    key = "s3://%s/baseline/awscli.bin" % bucket
    base = [aws, "--endpoint-url", endpoint, "--only-show-errors", "s3", "cp"]
    start = time.monotonic()
    subprocess.run(base + [path, key], env=env, check=True)
    put = time.monotonic() - start
    start = time.monotonic()
    subprocess.run(base + [key, out], env=env, check=True)
    get = time.monotonic() - start
    subprocess.run([aws, "--endpoint-url", endpoint, "--only-show-errors", "s3", "rm", key],
                   env=env, check=True)
    os.unlink(config.name)
    return put, get


def main():
    tool, endpoint, bucket, path = sys.argv[1:5]
    out = path + ".back"
    put, get = (boto3_run if tool == "boto3" else awscli_run)(endpoint, bucket, path, out)
    same = filecmp.cmp(path, out, shallow=False)
    os.unlink(out)
    if not same:
        print("error the downloaded copy differs", flush=True)
        sys.exit(1)
    print("put_s %.6f get_s %.6f" % (put, get), flush=True)


if __name__ == "__main__":
    main()
