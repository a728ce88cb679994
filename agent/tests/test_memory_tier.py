"""The memory tier through the agent: a restarted trainer loads from ckptd's
memory, the every-step policy, and clear errors."""
import subprocess
import sys

import pytest
import torch

import ckpt


def state(seed: int):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(64, 33, generator=g), "b": torch.randn(7, generator=g).half(),
            "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3), "epoch": seed}


def blank():
    return {"w": torch.zeros(64, 33), "b": torch.zeros(7).half(), "scalar": torch.tensor(0.0),
            "empty": torch.zeros(0, 3), "epoch": -1}


def test_tier_for_step_is_memory_every_step_and_both_every_kth():
    assert [ckpt.tier_for_step(s, 3) for s in range(1, 7)] == [
        "memory", "memory", "both", "memory", "memory", "both"]
    assert ckpt.tier_for_step(4, None) == "durable"
    assert ckpt.tier_for_step(4, 0) == "memory"


def test_a_killed_trainer_restarts_from_memory(tiered):
    # The trainer saves step 7 to memory and dies by SIGKILL without closing.
    script = f"""
import os, signal, sys, torch
sys.path[:0] = {sys.path!r}
import ckpt
from test_memory_tier import state
cp = ckpt.Checkpointer("crash", socket_path={tiered.socket!r})
cp.save(7, state(7), tier="memory").wait_persisted()
print("saved", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    trainer = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             cwd=__import__("os").path.dirname(__file__))
    assert "saved" in trainer.stdout, trainer.stderr
    assert trainer.returncode == -9
    cp = ckpt.Checkpointer("crash", socket_path=tiered.socket)
    target = blank()
    assert cp.load("latest", target) == 7
    assert cp.last_load_tiers == ["memory"]
    assert cp.last_load_fallback_chunks == 0
    want = state(7)
    assert torch.equal(target["w"], want["w"]) and torch.equal(target["b"], want["b"])
    assert target["scalar"].item() == 2.5 and target["epoch"] == 7


def test_policy_saves_every_step_to_memory_and_every_kth_to_storage(tiered):
    cp = ckpt.Checkpointer("policy", socket_path=tiered.socket, durable_every=2)
    for step in range(1, 5):
        cp.save(step, state(step)).wait_persisted()
    target = blank()
    assert cp.load("latest", target) == 4
    assert cp.last_load_tiers == ["memory"]
    assert torch.equal(target["w"], state(4)["w"])
    # Step 3 went to memory only and memory keeps the newest step.
    with pytest.raises(ckpt.CheckpointError):
        cp.load(3, blank(), source="durable")


def test_bad_tier_and_missing_memory_tier_are_clear(daemon):
    cp = ckpt.Checkpointer("plain", socket_path=daemon.socket)
    with pytest.raises(ValueError, match="tier"):
        cp.save(1, state(1), tier="ram")
    with pytest.raises(ckpt.CheckpointError, match="--memory_tier_bytes"):
        cp.save(1, state(1), tier="memory").wait_persisted()
    with pytest.raises(ckpt.CheckpointError, match="--memory_tier_bytes"):
        cp.load("latest", blank(), source="memory")
    with pytest.raises(ValueError, match="source"):
        cp.load("latest", blank(), source="disk")
