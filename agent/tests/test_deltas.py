"""Step deltas on a real training run: the example trainer saves 10 steps,
a full one every 5 and deltas against it between, and each step loads,
into another layout, bit-identical to the same run saved whole."""
import json
import os
import subprocess
import sys

import torch

import ckpt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../examples"))
import train_lm  # noqa: E402

TRAINER = os.path.join(os.path.dirname(__file__), "../examples/train_lm.py")
CKPTCTL = os.environ.get("CKPTCTL", os.path.join(os.path.dirname(__file__), "../../build/tools/ckptctl/ckptctl"))


def train(daemon, job, delta_every):
    subprocess.run([sys.executable, TRAINER, "--socket", daemon.socket, "--job", job, "--world",
                    "2", "--steps", "10", "--every", "1", "--delta-every", str(delta_every),
                    # Each save sees the one before committed: the chain is
                    # exact (overlapping saves count committed steps only).
                    "--wait-persisted"],
                   check=True, timeout=300, capture_output=True)


def fresh_state():
    """What a checkpoint of the trainer holds, for one rank that did not
    train: the world of 1 that loads what a world of 2 saved."""
    model = train_lm.TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    ckpt.init_optimizer_state(opt)
    return train_lm.training_state(model, opt, 0, 0)


def tensors(state, prefix=""):
    out = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out.update(tensors(v, f"{prefix}{k}."))
        elif isinstance(v, torch.Tensor):
            out[prefix + str(k)] = v.detach().contiguous().reshape(-1).view(torch.uint8).clone()
    return out


def manifest(daemon, job, step):
    out = subprocess.run([CKPTCTL, "--socket", daemon.socket, "inspect", job, str(step)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])


def test_deltas_of_a_training_run_load_like_whole_steps(daemon):
    train(daemon, "lm-deltas", 5)
    train(daemon, "lm-whole", 1)
    stored = {}
    for step in range(1, 11):
        m = manifest(daemon, "lm-deltas", step)
        base = 1 if step <= 5 else 6
        if step == base:
            assert "delta_base_step" not in m, step
        else:
            assert int(m["delta_base_step"]) == base, step
        chunks = [c for t in m["tensors"] for s in t["shards"] for c in s["chunks"]]
        stored[step] = sum(int(c.get("stored_length", c["length"])) for c in chunks
                           if c.get("delta_base_step"))
        assert (stored[step] > 0) == (step != base), step
        assert "delta_base_step" not in manifest(daemon, "lm-whole", step)
    listed = subprocess.run([CKPTCTL, "--socket", daemon.socket, "list", "lm-deltas"],
                            capture_output=True, text=True, check=True).stdout
    assert "delta of 1" in listed and "delta of 6" in listed

    for step in (3, 8, 10):
        got, want = fresh_state(), fresh_state()
        ckpt.Checkpointer("lm-deltas", socket_path=daemon.socket).load(step, got)
        ckpt.Checkpointer("lm-whole", socket_path=daemon.socket).load(step, want)
        got_t, want_t = tensors(got), tensors(want)
        assert got_t.keys() == want_t.keys()
        for name in want_t:
            assert torch.equal(got_t[name], want_t[name]), (step, name)
        # Resharded: rows [10, 50) of the embedding alone.
        rows = torch.zeros(40, train_lm.DIM)
        ckpt.Checkpointer("lm-deltas", socket_path=daemon.socket).load(
            step, {"model": {"embed.weight": ckpt.shard_box(rows, (train_lm.VOCAB, train_lm.DIM),
                                                           (10, 0))}})
        assert torch.equal(rows, want["model"]["embed.weight"][10:50]), step
