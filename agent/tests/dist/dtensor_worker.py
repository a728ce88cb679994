"""One rank of a DTensor save or load (run by world.py).

    dtensor_worker.py SOCKET JOB LAYOUT MODE:STEP[:SEED][@LAYOUT] ...

LAYOUT names a mesh and each tensor's placements (an action may name its
own after "@"); each action runs in turn.
The global tensors come from SEED (default: STEP; all ranks make the same
ones). Modes: save, load (checks every
local shard against torch's own distribute_tensor of the global, byte for
byte), dcp_save, dcp_load (the same through torch.distributed.checkpoint
with ckpt's writer and reader), dcp_latest (dcp.load of "latest", which
must be STEP), resave (load STEP, save STEP+100 from what was
loaded), dcp_async, dcp_async_process and dcp_async_reuse (async_save in
threads, in a process, through one writer given ids twice;
the trainer overwrites its tensors as soon as it returns), fs_save
(DCP's own FileSystemWriter, for import), stage_save and stage_load (a
tensor on a mesh of ranks 0 and 1 only, as a pipeline stage holds it), partial (a Partial placement is
refused).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._api import DTensor
from torch.distributed.tensor.placement_types import _StridedShard

import ckpt
from ckpt.dcp import StorageReader, StorageWriter

# name -> (dtype, global shape): uneven splits everywhere, an empty shard
# for "b" on 4 ranks.
TENSORS = {
    "a": (torch.float32, (7, 5)),
    "b": (torch.bfloat16, (3, 6)),
    "c": (torch.int64, (10,)),
    "d": (torch.float16, (4, 9, 2)),
    "e": (torch.float64, (8, 6)),
}

LAYOUTS = {
    # FSDP over TP gives _StridedShard(0) on dp then Shard(0) on tp.
    "mesh2x2": ((2, 2), {
        "a": [Shard(0), Shard(1)], "b": [Shard(0), Shard(0)],
        "c": [_StridedShard(0, split_factor=2), Shard(0)], "d": [Replicate(), Shard(2)],
        "e": [Replicate(), Replicate()]}),
    # Three dimensions (dp, cp, tp): strided, replicated and sharded at once.
    "mesh2x1x2": ((2, 1, 2), {
        "a": [Shard(0), Replicate(), Shard(1)], "b": [Shard(1), Shard(0), Shard(0)],
        "c": [_StridedShard(0, split_factor=2), Replicate(), Shard(0)],
        "d": [Replicate(), Shard(1), Shard(2)], "e": [Shard(1), Replicate(), Replicate()]}),
    "mesh4": ((4,), {"a": [Shard(0)], "b": [Shard(0)], "c": [Shard(0)], "d": [Shard(1)],
                     "e": [Replicate()]}),
    "mesh3": ((3,), {"a": [Shard(1)], "b": [Replicate()], "c": [Shard(0)], "d": [Shard(0)],
                     "e": [Shard(0)]}),
    "mesh1x2": ((1, 2), {"a": [Replicate(), Shard(0)], "b": [Shard(0), Shard(1)],
                         "c": [Replicate(), Shard(0)], "d": [Shard(1), Shard(1)],
                         "e": [Shard(0), Shard(1)]}),
    "mesh2": ((2,), {"a": [Shard(1)], "b": [Shard(0)], "c": [Replicate()], "d": [Shard(2)],
                     "e": [Shard(0)]}),
    "mesh1": ((1,), {name: [Replicate()] for name in TENSORS}),
}


def global_tensors(seed):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, (dtype, shape) in TENSORS.items():
        if dtype.is_floating_point:
            out[name] = (torch.randn(shape, generator=g) * 100).to(dtype)
        else:
            out[name] = torch.randint(-2**40, 2**40, shape, generator=g, dtype=dtype)
    return out


def distributed(mesh, placements, values):
    # src_data_rank=None: every rank splits its own copy (no scatter).
    return {n: distribute_tensor(values[n], mesh, placements[n], src_data_rank=None)
            for n in TENSORS}


def same_bytes(a, b):
    return a.shape == b.shape and torch.equal(a.contiguous().view(-1).view(torch.uint8),
                                              b.contiguous().view(-1).view(torch.uint8))


def check(mesh, placements, got, want_global, what):
    want = distributed(mesh, placements, want_global)
    for name in TENSORS:
        assert isinstance(got[name], DTensor), name
        assert same_bytes(got[name]._local_tensor, want[name]._local_tensor), (
            f"{what}: {name} on rank {dist.get_rank()}: {got[name]._local_tensor} != "
            f"{want[name]._local_tensor}")


def fs_dir(cp, step):
    """Where fs_save puts DCP's own files (beside the daemon's socket)."""
    return os.path.join(os.path.dirname(cp.socket), f"fs-{cp.job}-{step}")


def act(cp, mesh, layout, mode, step, seed):
    shape, placements = LAYOUTS[layout]
    values = global_tensors(seed)
    zeros = {n: torch.zeros_like(v) for n, v in values.items()}
    if mode == "save":
        cp.save(step, {"t": distributed(mesh, placements, values), "seed": seed}).wait_persisted()
    elif mode == "load":
        state = {"t": distributed(mesh, placements, zeros), "seed": -1}
        assert cp.load(step, state) == step
        assert state["seed"] == seed, state["seed"]
        check(mesh, placements, state["t"], values, f"load of step {step} as {layout}")
    elif mode == "resave":
        state = {"t": distributed(mesh, placements, zeros), "seed": -1}
        cp.load(step, state)
        check(mesh, placements, state["t"], values, f"load of step {step} as {layout}")
        cp.save(step + 100, state).wait_persisted()
    elif mode == "dcp_save":
        dcp.save({"t": distributed(mesh, placements, values), "seed": seed},
                 storage_writer=StorageWriter(f"ckpt://{cp.job}/{step}", socket_path=cp.socket))
    elif mode in ("dcp_load", "dcp_latest"):
        state = {"t": distributed(mesh, placements, zeros), "seed": -1}
        which = step if mode == "dcp_load" else "latest"
        reader = StorageReader(f"ckpt://{cp.job}/{which}", socket_path=cp.socket)
        dcp.load(state, storage_reader=reader)
        assert reader.loaded_step == step, reader.loaded_step
        assert state["seed"] == seed, state["seed"]
        check(mesh, placements, state["t"], values, f"dcp.load of step {which} as {layout}")
    elif mode in ("dcp_async", "dcp_async_process"):
        # The trainer overwrites its tensors as soon as async_save returns:
        # the checkpoint must hold what they were before.
        state = {"t": distributed(mesh, placements, values), "seed": seed}
        if mode == "dcp_async":
            future = dcp.async_save(state, storage_writer=StorageWriter(
                f"ckpt://{cp.job}/{step}", socket_path=cp.socket))
        else:
            future = dcp.async_save(
                state, storage_writer=StorageWriter(f"ckpt://{cp.job}/{step}",
                                                    socket_path=cp.socket, staging="copy"),
                async_checkpointer_type=AsyncCheckpointerType.PROCESS)
        for t in state["t"].values():
            t._local_tensor.fill_(7)
        future.result()
    elif mode == "dcp_async_reuse":
        # One writer, the ids given to async_save: steps STEP and STEP+1
        # (seeds likewise), each overwritten as soon as it returns.
        writer = StorageWriter(socket_path=cp.socket)
        for k in (0, 1):
            state = {"t": distributed(mesh, placements, global_tensors(seed + k)),
                     "seed": seed + k}
            future = dcp.async_save(state, storage_writer=writer,
                                    checkpoint_id=f"ckpt://{cp.job}/{step + k}")
            for t in state["t"].values():
                t._local_tensor.fill_(7)
            future.result()
    elif mode == "fs_save":
        dcp.save({"t": distributed(mesh, placements, values), "seed": seed},
                 storage_writer=dcp.FileSystemWriter(fs_dir(cp, step)))
    elif mode in ("stage_save", "stage_load"):
        # A pipeline stage's tensor: on a mesh of ranks 0 and 1 only (the
        # others hold nothing of it), saved from there, loaded by all.
        stage = DeviceMesh("cpu", [0, 1]) if mode == "stage_save" else mesh
        where = [Shard(0)] * stage.ndim
        if mode == "stage_save":
            cp.save(step, {"s": distribute_tensor(values["a"], stage, where, src_data_rank=None)}
                    ).wait_persisted()
        else:
            got = {"s": distribute_tensor(zeros["a"], stage, where, src_data_rank=None)}
            cp.load(step, got)
            want = distribute_tensor(values["a"], stage, where, src_data_rank=None)
            assert same_bytes(got["s"]._local_tensor, want._local_tensor), "stage tensor"
    elif mode == "partial":
        t = DTensor.from_local(torch.ones(2, 2), mesh, [Partial()] * len(shape))
        try:
            cp.save(step, {"p": t})
        except ValueError as e:
            assert "partial" in str(e) and "p:" in str(e), e
        else:
            raise AssertionError("a Partial DTensor was saved")
    else:
        raise SystemExit(f"unknown mode {mode}")


def main():
    socket, job, layout = sys.argv[1:4]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    meshes = {}  # by layout; every rank makes the same ones, in the same order
    cp = ckpt.Checkpointer(job, rank, world, socket_path=socket)
    cp.job, cp.socket = job, socket
    for action in sys.argv[4:]:
        action, _, where = action.partition("@")
        where = where or layout
        if where not in meshes:
            meshes[where] = init_device_mesh("cpu", LAYOUTS[where][0])
        mode, step, *seed = action.split(":")
        act(cp, meshes[where], where, mode, int(step), int(seed[0]) if seed else int(step))
    cp.close()
    dist.barrier()
    dist.destroy_process_group()
    print("ok", flush=True)
    # Not a normal exit: gloo's worker threads can abort the interpreter's
    # teardown (SIGABRT, about 1 run in 7 with FSDP; fsdp_worker.py), and
    # everything this rank had to do is done.
    os._exit(0)


if __name__ == "__main__":
    main()
