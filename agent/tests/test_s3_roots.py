"""ckptd on an s3:// root (a real Swift s3api server, tools/dev/s3-server.sh):
the PyTorch ranks save through it, `ckptctl export` reads the bucket itself,
`ckptctl import` of that export commits a new step into the bucket, and
three ranks load the imported step resharded, every byte checked."""
import os
import subprocess
import tempfile

import boto3
import pytest
import torch
from botocore.config import Config

from conftest import Daemon
from test_export import CKPTCTL, expected, read_safetensors
from test_multirank import run_ranks

SERVER = os.path.join(os.path.dirname(__file__), "../../tools/dev/s3-server.sh")
KEYS = {"AWS_ACCESS_KEY_ID": "ckpt:tester", "AWS_SECRET_ACCESS_KEY": "ckpt-secret"}


@pytest.fixture(scope="module")
def s3_endpoint():
    with tempfile.TemporaryDirectory(prefix="ckpt-swift-") as root:
        started = subprocess.run([SERVER, "start", root], capture_output=True, text=True)
        assert started.returncode == 0, started.stderr
        endpoint = started.stdout.strip().split("endpoint=")[-1]
        try:
            yield endpoint
        finally:
            subprocess.run([SERVER, "stop", root], check=False)


@pytest.fixture
def s3_daemon(s3_endpoint, monkeypatch):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    bucket = f"agent-{os.getpid()}-{len(s3.list_buckets()['Buckets'])}"
    s3.create_bucket(Bucket=bucket)
    with tempfile.TemporaryDirectory(prefix="ckpt-agent-") as root:
        d = Daemon(root, flags=[f"--storage_root=s3://{bucket}/root",
                                f"--s3_endpoint={s3_endpoint}", "--s3_part_bytes=5242880"])
        d.storage = f"s3://{bucket}/root"
        d.start()
        try:
            yield d, s3, bucket
        finally:
            d.stop()


def test_save_export_import_and_resharded_load_all_in_the_bucket(s3_daemon, s3_endpoint, tmp_path):
    daemon, s3, bucket = s3_daemon
    run_ranks("save_export", daemon.socket, "exp", 2)
    model = tmp_path / "model"
    proc = subprocess.run([CKPTCTL, "export", "exp", "--storage-root", daemon.storage,
                           "--s3-endpoint", s3_endpoint, "--out", str(model),
                           "--max-shard-size", "1KB"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = {}
    for path in sorted(model.glob("*.safetensors")):
        got.update(read_safetensors(path)[0])
    for name, want in expected().items():
        assert got[name].dtype == want.dtype and list(got[name].shape) == list(want.shape), name
        assert torch.equal(got[name].reshape(-1).view(torch.uint8),
                           want.reshape(-1).view(torch.uint8)), name

    proc = subprocess.run([CKPTCTL, "--socket", daemon.socket, "import", str(model), "imported", "1"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "imported 7 tensors" in proc.stdout, proc.stdout
    # Committed in the bucket, not on a local disk.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="root/imported/")["Contents"]]
    assert "root/imported/step-1/COMMIT" in keys, keys
    assert not os.path.exists(os.path.join(daemon.root, "storage"))
    run_ranks("load_imported", daemon.socket, "imported", 3)
