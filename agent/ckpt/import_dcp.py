"""A checkpoint written by DCP's own FileSystemWriter, imported into ckptd.

    python -m ckpt.import_dcp DIR JOB STEP [--socket PATH] [--allow-pickle]

Reads DIR with DCP's FileSystemReader in this one process (it needs memory
for the whole checkpoint) and saves it as step STEP of JOB: each tensor
whole, each non-tensor as the bytes DCP keeps of it. Loads then reshard it
to any layout, through Checkpointer.load or dcp.load with ckpt's reader.

DCP's metadata file and its non-tensors are pickles, and reading them runs
code: only import checkpoints you trust; --allow-pickle says that you do
(without it, the import refuses before reading anything).
"""
import argparse
import io
import os
import sys

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata

from ._ckpt import CheckpointError
from .checkpointer import Checkpointer, _describe
from .state import escape
from .values import TORCH


def import_dcp(path: str, job: str, step: int, *, socket_path=None,
               allow_pickle: bool = False) -> dict:
    """Saves DIR's checkpoint as job's step; returns {"tensors", "objects", "bytes"}."""
    if not allow_pickle:
        raise PermissionError(
            f"{path}: a DCP checkpoint's metadata and non-tensors are pickles, and reading "
            f"them runs code; pass allow_pickle=True (--allow-pickle) for one you trust")
    if not os.path.isdir(path):
        raise NotADirectoryError(f"{path}: not a directory holding DCP's .metadata (what "
                                 f"FileSystemWriter writes)")
    reader = dcp.FileSystemReader(path)
    try:
        metadata = reader.read_metadata()
    except FileNotFoundError:
        raise
    except Exception as e:  # pickle's and torch's many errors for a foreign file
        raise ValueError(f"{path}: its .metadata is not DCP's ({type(e).__name__}: {e})") from e
    if not isinstance(metadata, Metadata):
        raise ValueError(f"{path}: its .metadata holds a {type(metadata).__name__}, not DCP's "
                         f"Metadata")
    state, byte_keys = {}, []
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            state[fqn] = None  # replaced by the load
            byte_keys.append(fqn)
        else:
            state[fqn] = torch.empty(md.size, dtype=md.properties.dtype)
    # The file's flat names are the state's keys (flattening a flat dict
    # keeps them; without it DCP's planner drops the non-tensors it reads).
    dcp.load(state, storage_reader=reader, no_dist=True)
    tensors, objects, keep, total = [], [], [], 0
    for fqn, value in state.items():
        if fqn in byte_keys:
            blob = io.BytesIO()
            torch.save(value, blob)
            objects.append((escape(fqn), TORCH + blob.getvalue(), True))
            total += len(objects[-1][1])
        else:
            tensors.append(_describe(escape(fqn), value, keep))
            total += value.numel() * value.element_size()
    cp = Checkpointer(job, 0, 1, socket_path=socket_path)
    try:
        cp._submit(step, tensors, objects, keep).wait_persisted()
    finally:
        cp.close()
    return {"tensors": len(tensors), "objects": len(objects), "bytes": total}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ckpt.import_dcp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="the directory DCP's FileSystemWriter wrote")
    parser.add_argument("job")
    parser.add_argument("step", type=int)
    parser.add_argument("--socket", default=None, help="ckptd's socket ($CKPTD_SOCKET)")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="read DCP's pickles (runs code from the checkpoint)")
    args = parser.parse_args(argv)
    try:
        done = import_dcp(args.dir, args.job, args.step, socket_path=args.socket,
                          allow_pickle=args.allow_pickle)
    except (OSError, ValueError, CheckpointError) as e:
        print(f"import_dcp: {e}", file=sys.stderr)
        return 2
    print(f"imported {args.dir} as {args.job} step {args.step}: {done['tensors']} tensors, "
          f"{done['objects']} objects, {done['bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
