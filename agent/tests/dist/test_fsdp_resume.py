"""FSDP2 and TP x FSDP2 training through ckpt: SIGKILLed once a step's save is
committed, resumed from "latest", bit-identical to PyTorch's own way.

A resume on the same world must equal the run that was never interrupted.
A resume on another world (mesh) must equal the reference that makes the
same change with PyTorch's tools alone: the full state gathered at the
killed step (get_state_dict full_state_dict + cpu_offload, torch.save),
loaded by the new world with set_state_dict (broadcast_from_rank0). Both
compare every rank's loss of every step after the resume and the final
model and AdamW state, byte for byte: a load that missed the optimizer's
moments, its step count or the LR schedule's position diverges from the
second step after the resume on.

The runs are torchrun jobs of fsdp_worker.py (gloo on CPU); the references
are run once per module.
"""
import pytest
import torch

from fsdp_runs import HALT, STEPS, assert_same_state, run, run_killed


class Reference:
    """An uninterrupted run on the saving world, with its full state at
    step HALT; and, on demand, that state loaded by other worlds."""

    def __init__(self, root, nproc, *layout):
        self.root = root
        self.full = root / "full.pt"
        self.whole = run(nproc, root / "whole", *layout, "--full-at", HALT, self.full)
        self._resumed = {}

    def resumed(self, nproc, *layout):
        key = (nproc, *layout)
        if key not in self._resumed:
            out = self.root / f"resumed-{nproc}-{'-'.join(map(str, layout)) or 'fsdp'}"
            self._resumed[key] = run(nproc, out, *layout, "--resume", self.full)
            assert self._resumed[key].resumed_from == HALT
        return self._resumed[key]


@pytest.fixture(scope="module")
def fsdp4(tmp_path_factory):
    return Reference(tmp_path_factory.mktemp("fsdp4"), 4)


@pytest.fixture(scope="module")
def tp2x2(tmp_path_factory):
    return Reference(tmp_path_factory.mktemp("tp2x2"), 4, "--tp", 2)


def ckpt_args(daemon, job, options="sharded"):
    return ["--socket", daemon.socket, "--job", job, "--options", options]


def assert_resumed_like(resumed, want_losses, want_final, killed, reference):
    """resumed (from ckpt) went on from step HALT exactly as the run that
    gave want_losses (steps HALT+1 on) and want_final did."""
    # The killed run trained like the reference up to the kill, and the
    # steps after it change the weights (so equal final states mean something).
    assert killed.losses == reference.whole.losses[:HALT]
    assert len(want_losses) == STEPS - HALT
    at_halt = torch.load(reference.full, weights_only=True)["model"]
    assert sorted(at_halt) == sorted(want_final["model"])
    assert all(not torch.equal(at_halt[k], want_final["model"][k]) for k in at_halt)
    assert resumed.resumed_from == HALT
    assert resumed.losses == want_losses
    assert_same_state(resumed.final, want_final, "final")


def test_fsdp_killed_then_resumed_on_the_same_four_ranks_equals_uninterrupted(
        daemon, tmp_path, fsdp4):
    args = ckpt_args(daemon, "fsdp-4-to-4")
    killed = run_killed(4, tmp_path / "killed", *args)
    resumed = run(4, tmp_path / "resumed", *args, "--resume", "ckpt")
    whole = fsdp4.whole
    assert_resumed_like(resumed, whole.losses[HALT:], whole.final, killed, fsdp4)


def test_fsdp_killed_at_four_ranks_resumed_at_three_equals_torch_reshard(
        daemon, tmp_path, fsdp4):
    # Three ranks shard 16 rows as 6, 6, 4: uneven boxes.
    args = ckpt_args(daemon, "fsdp-4-to-3")
    killed = run_killed(4, tmp_path / "killed", *args)
    resumed = run(3, tmp_path / "resumed", *args, "--resume", "ckpt")
    want = fsdp4.resumed(3)
    assert_resumed_like(resumed, want.losses, want.final, killed, fsdp4)


@pytest.mark.parametrize("save_options, load_options", [
    ("full", "full_offload"),   # every rank saves full tensors; rank 0 loads and broadcasts
    ("full_offload", "full"),   # rank 0 alone saves them; every rank loads them all
])
def test_fsdp_full_state_dict_options_killed_at_four_resumed_at_two(
        daemon, tmp_path, fsdp4, save_options, load_options):
    job = f"fsdp-{save_options}-{load_options}"
    killed = run_killed(4, tmp_path / "killed", *ckpt_args(daemon, job, save_options))
    resumed = run(2, tmp_path / "resumed", *ckpt_args(daemon, job, load_options),
                  "--resume", "ckpt")
    want = fsdp4.resumed(2)
    assert_resumed_like(resumed, want.losses, want.final, killed, fsdp4)


def test_tp_by_fsdp_killed_on_2x2_resumed_on_1x2_equals_torch_reshard(
        daemon, tmp_path, tp2x2):
    # (dp, tp) = (2, 2) -> (1, 2): FSDP's _StridedShard over tensor-parallel
    # shards, saved; loaded where the data-parallel dimension is gone.
    args = ckpt_args(daemon, "tp-2x2-to-1x2")
    killed = run_killed(4, tmp_path / "killed", *args, "--tp", 2)
    resumed = run(2, tmp_path / "resumed", *args, "--tp", 2, "--resume", "ckpt")
    want = tp2x2.resumed(2, "--tp", 2)
    assert_resumed_like(resumed, want.losses, want.final, killed, tp2x2)
