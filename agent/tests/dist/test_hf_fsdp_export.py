"""A Hugging Face Llama trained under FSDP2 on 2 ranks, saved through ckpt as
DTensor shards, exported by ckptctl and loaded by transformers: the loaded
model's logits and every exported tensor equal the trained model's, bit for
bit. One torchrun trains every variant (a torchrun start is most of the
time); each variant is then checked on its own."""
import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest
import torch
from safetensors import safe_open

from conftest import Daemon
import hf_fsdp_worker

HERE = os.path.dirname(__file__)
CKPTCTL = os.environ.get("CKPTCTL", os.path.join(HERE, "../../../build/tools/ckptctl/ckptctl"))
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


@pytest.fixture(scope="module")
def trained():
    """(daemon, folder of the workers' VARIANT.pt) once every variant is saved."""
    with tempfile.TemporaryDirectory(prefix="ckpt-hf-fsdp-") as root:
        daemon = Daemon(root).start()
        try:
            out = os.path.join(root, "recorded")
            os.mkdir(out)
            env = dict(os.environ, OMP_NUM_THREADS="1")
            # Its own process group: a hung run is ended with its workers,
            # which a kill of torchrun alone would leave behind.
            proc = subprocess.Popen(
                [TORCHRUN, "--standalone", "--nproc-per-node", "2",
                 os.path.join(HERE, "hf_fsdp_worker.py"), daemon.socket, out,
                 *hf_fsdp_worker.VARIANTS], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, start_new_session=True)
            try:
                log, _ = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                log, _ = proc.communicate()
            assert proc.returncode == 0, log
            yield daemon, out
        finally:
            daemon.stop()


def export(daemon, job, out):
    """The model's tensors alone, named as Hugging Face names them, in
    several files (small ones: the model is some 80 KB)."""
    rename = os.path.join(daemon.root, "rename.json")
    with open(rename, "w") as f:
        json.dump({"^model\\.": ""}, f)
    proc = subprocess.run([CKPTCTL, "export", job, str(hf_fsdp_worker.STEPS), "--storage-root",
                           daemon.storage, "--out", str(out), "--tensors", "^model\\.",
                           "--rename", rename, "--max-shard-size", "24KB"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def same_bytes(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


@pytest.mark.parametrize("variant", list(hf_fsdp_worker.VARIANTS))
def test_fsdp2_checkpoint_exports_as_the_trained_hf_model(trained, tmp_path, variant):
    from transformers import LlamaForCausalLM
    daemon, recorded = trained
    want = torch.load(os.path.join(recorded, f"{variant}.pt"), weights_only=True)
    full = want["state"]
    config = hf_fsdp_worker.make_config(variant)
    if config.tie_word_embeddings:
        # Saved under both names, as model.state_dict() has them.
        assert same_bytes(full["lm_head.weight"], full["model.embed_tokens.weight"])

    # Training moved every tensor off its initial value (so a checkpoint of
    # the initial model, which every rank can rebuild, would not pass).
    initial = hf_fsdp_worker.build(config).state_dict()
    assert not [name for name, t in full.items() if same_bytes(t, initial[name])]

    out = tmp_path / "hf"
    export(daemon, variant, out)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(full)
    files = sorted(out.glob("*.safetensors"))
    assert len(files) > 1 and set(p.name for p in files) == set(index["weight_map"].values())
    seen = set()
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                assert index["weight_map"][name] == path.name, name
                assert same_bytes(f.get_tensor(name), full[name]), name
                seen.add(name)
    assert seen == set(full)

    config.save_pretrained(out)
    loaded = LlamaForCausalLM.from_pretrained(out).eval()
    assert loaded.dtype == config.dtype
    if config.tie_word_embeddings:
        assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    for name, t in loaded.state_dict().items():
        assert same_bytes(t, full[name]), name
    # The worker's forward ran on one thread; a different thread count may
    # sum in another order.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            logits = loaded(input_ids=hf_fsdp_worker.fixed_input(config)).logits
    finally:
        torch.set_num_threads(threads)
    assert same_bytes(logits, want["logits"])
