"""PyTorch 2's DTensors as the regions ckpt stores.

A DTensor knows its global shape, its device mesh and its placements; this
rank's local tensor is one box of the global tensor. The box comes from
torch's own computation (compute_local_shape_and_global_offset, what DCP
uses), so every placement torch can lay out is covered: Shard(d) with
uneven (even empty) last shards, Replicate() (every rank of the replica
group describes the same box and the daemon writes it once), and the
_StridedShard placements FSDP2 over tensor parallel produces. Partial()
holds addends of the tensor, not a part of it: it is refused.
"""
from .sharding import Shard, shard_box

try:
    from torch.distributed.tensor import DTensor, Partial
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
except ImportError:  # a torch without torch.distributed.tensor
    DTensor = None


def is_dtensor(value) -> bool:
    return DTensor is not None and isinstance(value, DTensor)


def holds_part(value) -> bool:
    """Whether this rank is in the DTensor's mesh (pipeline stages put
    tensors on sub-meshes: the other ranks hold nothing of them)."""
    return value.device_mesh.get_coordinate() is not None


def dtensor_shard(name: str, value) -> Shard:
    """This rank's part of value: its local tensor as a box of the global one."""
    for dim, placement in enumerate(value.placements):
        if isinstance(placement, Partial):
            raise ValueError(
                f"{name}: its placement on mesh dimension {dim} is {placement}: a partial "
                f"tensor holds addends, not a part; redistribute it (to Replicate() or "
                f"Shard()) before saving")
    global_shape = tuple(int(d) for d in value.shape)
    local = value._local_tensor  # not to_local(): no autograd node, the same storage
    shape, offsets = compute_local_shape_and_global_offset(value.shape, value.device_mesh,
                                                           value.placements)
    shape, offsets = tuple(int(d) for d in shape), tuple(int(o) for o in offsets)
    if tuple(local.shape) != shape:
        raise ValueError(
            f"{name}: the local tensor has shape {list(local.shape)} where its placements "
            f"{list(value.placements)} on a mesh of {list(value.device_mesh.shape)} give "
            f"{list(shape)}")
    if local.numel() == 0:
        # An empty last shard: its offsets may point past the end; the
        # region is empty wherever it starts.
        offsets = tuple(min(o, g) for o, g in zip(offsets, global_shape))
    return shard_box(local, global_shape, offsets)
