"""How a rank declares that a tensor is its part of a larger one.

A plain tensor in the state is whole (every rank that holds it holds all of
it: replicas are written once). A Shard says which part of a global tensor
the local tensor is: a box (offsets per dimension: tensor or pipeline
parallel slices) or a flat range of the row-major flattened global tensor
(FSDP's flat parameters). Loading fills each shard from whatever sharding
saved it.
"""
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch


@dataclass(frozen=True)
class Shard:
    tensor: torch.Tensor
    global_shape: Tuple[int, ...]
    offsets: Optional[Tuple[int, ...]] = None  # a box: where tensor starts
    flat_begin: Optional[int] = None  # a flat range: its first element

    def describe(self):
        """(kind, offsets, lengths, flat_begin, flat_end) for the client."""
        if self.offsets is not None:
            return "box", list(self.offsets), list(self.tensor.shape), 0, 0
        begin = int(self.flat_begin)
        return "flat", [], [], begin, begin + self.tensor.numel()


def shard_box(tensor: torch.Tensor, global_shape: Sequence[int], offsets: Sequence[int]) -> Shard:
    """tensor is the box of the global tensor starting at offsets."""
    global_shape, offsets = tuple(int(d) for d in global_shape), tuple(int(o) for o in offsets)
    if len(offsets) != len(global_shape) or tensor.dim() != len(global_shape):
        raise ValueError(
            f"shard_box: a {tensor.dim()}-d tensor, {len(offsets)} offsets and a "
            f"{len(global_shape)}-d global shape must agree")
    for d, (o, n, g) in enumerate(zip(offsets, tensor.shape, global_shape)):
        if o < 0 or o + n > g:
            raise ValueError(f"shard_box: dimension {d}: [{o}, {o + n}) is outside [0, {g})")
    return Shard(tensor, global_shape, offsets=offsets)


def shard_flat(tensor: torch.Tensor, global_shape: Sequence[int], begin: int) -> Shard:
    """tensor holds elements [begin, begin + numel) of the flattened global tensor."""
    global_shape = tuple(int(d) for d in global_shape)
    total = 1
    for d in global_shape:
        total *= d
    if begin < 0 or begin + tensor.numel() > total:
        raise ValueError(
            f"shard_flat: [{begin}, {begin + tensor.numel()}) is outside the {total} elements "
            f"of {list(global_shape)}")
    return Shard(tensor, global_shape, flat_begin=int(begin))


def split_range(length: int, rank: int, world: int) -> Tuple[int, int]:
    """[begin, end) of rank's part when length is split over world ranks as
    torch.tensor_split does (the first length % world parts one longer)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a world of {world}")
    base, extra = divmod(length, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def shard_rows(tensor: torch.Tensor, global_shape: Sequence[int], rank: int, world: int,
               dim: int = 0) -> Shard:
    """tensor is rank's slice of the global tensor split along dim over world
    ranks, as torch.tensor_split(global, world, dim)[rank] would be."""
    global_shape = tuple(int(d) for d in global_shape)
    begin, end = split_range(global_shape[dim], rank, world)
    if tensor.shape[dim] != end - begin:
        raise ValueError(
            f"shard_rows: rank {rank} of {world} holds {end - begin} of {global_shape[dim]} "
            f"along dimension {dim}, the tensor has {tensor.shape[dim]}")
    offsets = [0] * len(global_shape)
    offsets[dim] = begin
    return shard_box(tensor, global_shape, offsets)


def shard_columns(tensor: torch.Tensor, global_shape: Sequence[int], rank: int,
                  world: int) -> Shard:
    """A column split (dimension 1), as a row-parallel linear layer holds it."""
    return shard_rows(tensor, global_shape, rank, world, dim=1)
