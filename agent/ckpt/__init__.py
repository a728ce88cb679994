"""ckpt for PyTorch trainers: checkpoints that cost the trainer a fraction of
a second, survive crashes and load into a different sharding.

    import ckpt
    cp = ckpt.Checkpointer(job="llama-8b", rank=rank, world_size=world)
    h = cp.save(step, {"model": model.state_dict(), "optim": opt.state_dict()})
    ...                                   # compute goes on meanwhile
    h.wait_snapshot()                     # or cp.wrap_optimizer(opt) once
    cp.load("latest", state)              # fills the tensors in place
"""
from ._ckpt import CheckpointError
from .checkpointer import Checkpointer, SaveHandle, init_optimizer_state
from .sharding import Shard, shard_box, shard_flat, shard_rows, shard_columns, split_range
from .values import PickleRefused

__all__ = [
    "CheckpointError",
    "Checkpointer",
    "PickleRefused",
    "SaveHandle",
    "init_optimizer_state",
    "Shard",
    "shard_box",
    "shard_columns",
    "shard_flat",
    "shard_rows",
    "split_range",
]
