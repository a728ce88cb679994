"""ckpt for PyTorch trainers: checkpoints that cost the trainer a fraction of
a second, survive crashes and load into a different sharding.

    import ckpt
    cp = ckpt.Checkpointer(job="llama-8b", rank=rank, world_size=world)
    h = cp.save(step, {"model": model.state_dict(), "optim": opt.state_dict()})
    ...                                   # compute goes on meanwhile
    h.wait_snapshot()                     # or cp.wrap_optimizer(opt) once
    cp.load("latest", state)              # fills the tensors in place

With ckptd's memory tier (--memory_tier_bytes), Checkpointer(...,
durable_every=K) saves every step to the daemons' memory and every K-th
also to storage; a restarted trainer's load("latest") reads memory.
"""
from ._ckpt import CheckpointError
from .checkpointer import (Checkpointer, LoadSource, SaveHandle, init_optimizer_state,
                           tier_for_step)
from .policy import IntervalPolicy, expected_waste, young_daly_interval
from .sharding import Shard, shard_box, shard_flat, shard_rows, shard_columns, split_range
from .values import PickleRefused

__all__ = [
    "CheckpointError",
    "Checkpointer",
    "LoadSource",
    "PickleRefused",
    "SaveHandle",
    "IntervalPolicy",
    "expected_waste",
    "init_optimizer_state",
    "Shard",
    "shard_box",
    "shard_columns",
    "shard_flat",
    "shard_rows",
    "split_range",
    "tier_for_step",
    "young_daly_interval",
]
