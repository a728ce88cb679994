"""torch.distributed.checkpoint (DCP) through ckptd: dcp.save, dcp.async_save
and dcp.load unchanged, with ckpt's storage writer and reader.

    import torch.distributed.checkpoint as dcp
    from ckpt.dcp import StorageReader, StorageWriter
    dcp.save(state_dict, storage_writer=StorageWriter("ckpt://llama/100"))
    future = dcp.async_save(state_dict, storage_writer=StorageWriter("ckpt://llama/200"))
    dcp.load(state_dict, storage_reader=StorageReader("ckpt://llama/latest"))

Each rank hands its tensors (its DTensor shards, its plain tensors) to its
host's ckptd as boxes of the global tensors, planned with the other ranks
(replicas written once, writes balanced, tiers); a non-tensor goes as the
bytes DCP makes of it (torch.save), one copy for the job. The checkpoint is
an ordinary ckpt checkpoint whose MANIFEST is DCP's metadata: dcp.load reads
any ckpt checkpoint (one saved with Checkpointer.save too) and
Checkpointer.load reads one saved through DCP, each into the caller's
sharding.

async_save: with the checkpoint id given to a new writer, the writer stages
(once: a writer reused through async_save's checkpoint_id copies):
the snapshot is ckptd's (copied into the daemon's pool; no tensors made),
async_save returns once it is taken and the future completes at the commit.
The process mode (AsyncCheckpointerType.PROCESS) hands the state to another
process, which needs a copy of its own: StorageWriter(..., staging="copy").
"""
import io
import os
import threading

from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.futures import Future
from torch.distributed.checkpoint import StorageReader as _StorageReader
from torch.distributed.checkpoint import StorageWriter as _StorageWriter
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata,
                                                   Metadata, StorageMeta, TensorProperties,
                                                   TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.staging import AsyncStager, DefaultStager, StagingOptions
from torch.distributed.checkpoint.storage import WriteResult

from .checkpointer import Checkpointer, SaveHandle, _describe
from .dcp_sequences import dcp_view, item_objects
from .sharding import shard_box
from .state import escape, unescape
from .values import TORCH, decode

_SCHEME = "ckpt://"


def parse_checkpoint_id(checkpoint_id) -> Tuple[str, object]:
    """("job", step or "latest") of "ckpt://job/step"."""
    text = str(checkpoint_id)
    if not text.startswith(_SCHEME):
        raise ValueError(f"checkpoint id {text!r} is not ckpt://JOB/STEP")
    job, _, step = text[len(_SCHEME):].rpartition("/")
    if not job or not step:
        raise ValueError(f"checkpoint id {text!r} is not ckpt://JOB/STEP")
    if step == "latest":
        return job, step
    try:
        value = int(step)
    except ValueError:
        raise ValueError(f"checkpoint id {text!r}: the step {step!r} is not a number or "
                         f"'latest'") from None
    if value < 0:
        raise ValueError(f"checkpoint id {text!r}: the step is negative")
    return job, value


def _save_id(checkpoint_id) -> tuple:
    """(id, job, step) of a save's checkpoint id."""
    job, step = parse_checkpoint_id(checkpoint_id)
    if step == "latest":
        raise ValueError(f"checkpoint id {checkpoint_id!r}: a save needs a step number")
    return str(checkpoint_id), job, step


def _rank_and_world() -> Tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


# One attachment per process, job and place in the world, shared by the
# writer and the reader (ckptd takes one session per rank of a job).
_connections: Dict[tuple, Checkpointer] = {}
_connections_lock = threading.Lock()


def _checkpointer(socket_path: Optional[str], job: str) -> Checkpointer:
    rank, world = _rank_and_world()
    socket_path = socket_path or os.environ.get("CKPTD_SOCKET", "/run/ckptd/ckptd.sock")
    key = (os.getpid(), socket_path, job, rank, world)
    with _connections_lock:
        cp = _connections.get(key)
        if cp is None:
            # torchrun's LOCAL_WORLD_SIZE: fewer ranks here than in the job
            # means the job spans hosts, whose daemons meet at a coordinator.
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            cp = Checkpointer(job, rank, world, socket_path=socket_path,
                              local_rank=int(os.environ.get("LOCAL_RANK", rank)),
                              local_world_size=local_world if local_world < world else 0)
            _connections[key] = cp
    return cp


def _item_bytes(item) -> int:
    if item.type == WriteItemType.BYTE_IO:
        return 0
    n = 1
    for d in item.tensor_data.chunk.sizes:
        n *= int(d)
    return n * item.tensor_data.properties.dtype.itemsize


class StorageWriter(_StorageWriter, AsyncStager):
    """Writes dcp.save's and dcp.async_save's state through ckptd.

    checkpoint_id: "ckpt://JOB/STEP" (or given to dcp.save instead).
    tier: "durable", "memory" or "both" (ckptd's memory tier).
    staging: "ckpt" (async_save's snapshot is ckptd's) or "copy" (DCP's
    copy into shared memory: for the process mode)."""

    _synchronize_after_execute = False  # stage() returns with the snapshot taken

    def __init__(self, checkpoint_id=None, *, socket_path: Optional[str] = None,
                 tier: str = "durable", staging: str = "ckpt"):
        super().__init__()
        if tier not in ("durable", "memory", "both"):
            raise ValueError(f"tier is 'durable', 'memory' or 'both', not {tier!r}")
        if staging not in ("ckpt", "copy"):
            raise ValueError(f"staging is 'ckpt' or 'copy', not {staging!r}")
        self.socket_path = socket_path
        self.tier = tier
        self.staging = staging
        self.is_coordinator = False
        self._unsaved = False
        self._staged: Dict[tuple, SaveHandle] = {}  # snapshots taken by stage()
        # The id it was made with; one that reset() names holds for the
        # thread that named it: each async_save plans and writes in a thread
        # of its own, and two in flight through one writer keep theirs.
        self._made_with = (None, None, None)
        self._named = threading.local()
        if checkpoint_id is not None:
            self._made_with = _save_id(checkpoint_id)
            # Only the id it was made with, once: an id that reset() set
            # came from an async_save that has staged already (DCP stages
            # first, then names the id), and may be another save's.
            self._unsaved = True

    @property
    def checkpoint_id(self):
        return getattr(self._named, "id", self._made_with)[0]

    @property
    def job(self):
        return getattr(self._named, "id", self._made_with)[1]

    @property
    def step(self):
        return getattr(self._named, "id", self._made_with)[2]

    # --- StorageWriter ---
    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is None:
            return  # the id given at construction stays
        self._named.id = _save_id(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args, **kwargs) -> None:
        if self.job is None:
            raise ValueError("ckpt.dcp.StorageWriter has no checkpoint id: give it "
                             "ckpt://JOB/STEP, or pass checkpoint_id= to dcp.save")
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner) -> Future:
        handle = self._staged.pop((self.job, self.step), None)
        if self._staged:
            staged = ", ".join(f"ckpt://{job}/{step}" for job, step in self._staged)
            self._staged.clear()
            raise ValueError(f"async_save staged {staged} (the writer's checkpoint id) but "
                             f"saves {self.checkpoint_id}: give the id to the writer only")
        if handle is None:
            handle = self._save(plan.items, planner.resolve_data)
        self._unsaved = False
        handle.wait_persisted()
        results = [WriteResult(index=item.index, size_in_bytes=_item_bytes(item),
                               storage_data=escape(item.index.fqn)) for item in plan.items]
        future: Future = Future()
        future.set_result(results)
        return future

    def finish(self, metadata, results) -> None:
        pass  # committed by ckptd when every rank's part was persisted

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return str(checkpoint_id).startswith(_SCHEME)

    # --- AsyncStager ---
    def stage(self, state_dict):
        if self.staging == "copy" or not self._unsaved:
            # Without a fresh id, the step to save to is unknown (async_save
            # names it later): copy now, save from the copy then.
            stager = DefaultStager(StagingOptions(False, self.staging == "copy", False, False))
            try:
                return stager.stage(state_dict)
            finally:
                stager.close()
        planner = DefaultSavePlanner()
        rank, world = _rank_and_world()
        planner.set_up_planner(state_dict, is_coordinator=rank == 0)
        items = _one_holder_per_value(planner.create_local_plan().items, rank, world)
        handle = self._save(items, planner.resolve_data)
        handle.wait_snapshot()
        self._staged[(self.job, self.step)] = handle
        return state_dict

    def synchronize_staging(self) -> None:
        pass

    def __getstate__(self):
        if self._staged:
            raise RuntimeError(
                "ckpt.dcp.StorageWriter staged in this process cannot move to another: "
                "async_save(..., async_checkpointer_type=PROCESS) needs "
                "StorageWriter(..., staging='copy')")
        state = dict(self.__dict__)
        del state["_named"]  # ids named in this process's threads stay here
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._named = threading.local()

    def _save(self, items, resolve) -> SaveHandle:
        """Hands this rank's items to ckptd; returns at once."""
        cp = _checkpointer(self.socket_path, self.job)
        tensors, objects, keep, names = [], [], [], set()
        for item in items:
            fqn = item.index.fqn
            name = escape(fqn)
            if name in names:
                raise ValueError(f"{fqn}: this rank holds more than one shard of it; ckpt takes "
                                 f"one region of a tensor per rank")
            names.add(name)
            data = resolve(item)
            if item.type == WriteItemType.BYTE_IO:
                blob = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                objects.append((name, TORCH + blob, True))
                for extra in item_objects(fqn, blob):  # Checkpointer's names too
                    if extra[0] not in names:
                        names.add(extra[0])
                        objects.append(extra)
                continue
            tensor = data.detach()
            chunk = item.tensor_data.chunk
            if tuple(tensor.shape) != tuple(chunk.sizes):
                raise ValueError(f"{fqn}: DCP resolved a {list(tensor.shape)} tensor for a "
                                 f"{list(chunk.sizes)} chunk")
            leaf = shard_box(tensor, item.tensor_data.size, chunk.offsets)
            tensors.append(_describe(name, leaf, keep))
        return cp._submit(self.step, tensors, objects, keep, tier=self.tier)


def _one_holder_per_value(items, rank: int, world: int) -> list:
    """DCP keeps one copy of a non-tensor the ranks share: the lowest rank
    holding it writes it (dcp.save's global plan decides this; a stage that
    runs before it decides here, with one exchange of names)."""
    bytes_names = sorted(i.index.fqn for i in items if i.type == WriteItemType.BYTE_IO)
    held = [bytes_names]
    if world > 1:  # every rank takes part, holding values or not
        held = [None] * world
        dist.all_gather_object(held, bytes_names)
    owner: Dict[str, int] = {}
    for r, names in enumerate(held):
        for name in names:
            owner.setdefault(name, r)
    return [i for i in items if i.type != WriteItemType.BYTE_IO or owner[i.index.fqn] == rank]


def _like_target(planner, item, value: list):
    """value as a tuple where the caller's state holds a tuple there (the
    stored items do not say which it was)."""
    try:
        from torch.distributed.checkpoint._traverse import get_element
        target = get_element(planner.original_state_dict, planner.mappings[item.dest_index.fqn])
    except Exception:  # a planner without DefaultLoadPlanner's mappings
        return value
    return tuple(value) if isinstance(target, tuple) else value


class StorageReader(_StorageReader):
    """Reads a ckpt checkpoint for dcp.load, resharded to the caller's state.

    checkpoint_id: "ckpt://JOB/STEP" or "ckpt://JOB/latest".
    source: "any", "memory" or "durable" (which of ckptd's tiers to read).
    allow_pickle: non-tensors that need pickle to load (DCP's own format
    pickles them) are refused unless allowed: loading must not run code from
    the checkpoint by default."""

    def __init__(self, checkpoint_id=None, *, socket_path: Optional[str] = None,
                 source: str = "any", allow_pickle: bool = False):
        super().__init__()
        if source not in ("any", "memory", "durable"):
            raise ValueError(f"source is 'any', 'memory' or 'durable', not {source!r}")
        self.socket_path = socket_path
        self.source = source
        self.allow_pickle = allow_pickle
        self.checkpoint_id = None
        self.job, self.step = None, None
        self.loaded_step: Optional[int] = None  # the step "latest" resolved to
        self._contents = None
        self._composed: Dict[str, List[str]] = {}
        if checkpoint_id is not None:
            self.reset(checkpoint_id)

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is None:
            return
        self.job, self.step = parse_checkpoint_id(checkpoint_id)
        self.checkpoint_id = str(checkpoint_id)
        self.loaded_step, self._contents = None, None

    def read_metadata(self, *args, **kwargs) -> Metadata:
        if self.job is None:
            raise ValueError("ckpt.dcp.StorageReader has no checkpoint id: give it "
                             "ckpt://JOB/STEP, or pass checkpoint_id= to dcp.load")
        contents = _checkpointer(self.socket_path, self.job).contents(self.step)
        self._contents, self.loaded_step = contents, contents.step
        described = {}
        for name, info in contents.tensors.items():
            size = torch.Size(info.shape)
            # One chunk, the whole tensor: DCP then asks for exactly the
            # boxes the caller holds, and ckptd reshards.
            described[unescape(name)] = TensorStorageMetadata(
                TensorProperties(dtype=info.dtype), size,
                [ChunkStorageMetadata(offsets=torch.Size([0] * len(size)), sizes=size)])
        # Lists Checkpointer.save kept item by item, as the one value DCP asks
        # for; the items the writer added for Checkpointer, out of sight.
        self._composed, hidden = dcp_view(contents.objects, contents.tensors)
        for name in list(contents.objects) + list(self._composed):
            if name not in hidden:
                described.setdefault(unescape(name), BytesStorageMetadata())
        return Metadata(state_dict_metadata=described,
                        storage_meta=StorageMeta(checkpoint_id=self.checkpoint_id))

    def set_up_storage_reader(self, metadata, is_coordinator: bool, *args, **kwargs) -> None:
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner) -> Future:
        contents = self._contents
        tensor_leaves: List[tuple] = []
        fills: List[tuple] = []  # (item, target, what was filled)
        byte_items: List[tuple] = []
        composed_items: List[tuple] = []  # values made of stored items
        names = set()
        for item in plan.items:
            fqn = item.storage_index.fqn
            name = escape(fqn)
            if item.type == LoadItemType.BYTE_IO:
                if name not in contents.objects and name in self._composed:
                    composed_items.append((name, item))
                else:
                    byte_items.append((name, item))
                continue
            if name in names:
                raise ValueError(f"{fqn}: this rank asks for more than one shard of it; ckpt "
                                 f"fills one region of a tensor per rank")
            names.add(name)
            info = contents.tensors[name]
            target = planner.resolve_tensor(item).detach()
            # DCP casts to the caller's dtype; ckptd fills the stored one.
            filled = target if target.dtype == info.dtype else torch.empty(
                target.shape, dtype=info.dtype, device=target.device)
            tensor_leaves.append((name, shard_box(filled, info.shape, item.storage_offsets)))
            fills.append((item, target, filled))
        keys = [name for name, _ in byte_items]
        for name, _ in composed_items:
            keys += self._composed[name]  # hidden from DCP: asked for by no other item
        _, values = _checkpointer(self.socket_path, self.job)._load_raw(
            self.loaded_step, tensor_leaves, keys, self.source)
        with torch.no_grad():
            for item, target, filled in fills:
                if filled is not target:
                    target.copy_(filled)
                planner.commit_tensor(item, target)
        for name, item in byte_items:
            planner.load_bytes(item, io.BytesIO(self._torch_blob(name, values[name])))
        for name, item in composed_items:
            out = io.BytesIO()
            torch.save(_like_target(planner, item, self._compose(name, values)), out)
            planner.load_bytes(item, io.BytesIO(out.getvalue()))
        future: Future = Future()
        future.set_result(None)
        return future

    def _compose(self, name: str, values: Dict[str, bytes]) -> list:
        return [decode(item, values[item], self.allow_pickle) for item in self._composed[name]]

    def _torch_blob(self, name: str, data: bytes) -> bytes:
        """The torch.save bytes DCP's planner loads, from a value as stored."""
        if data[:1] == TORCH:
            blob = data[1:]
            # DCP unpickles what it reads; check first that no code would run.
            if not self.allow_pickle:
                try:
                    torch.load(io.BytesIO(blob), weights_only=True)
                except Exception as e:
                    raise ValueError(
                        f"{unescape(name)}: loading it would unpickle code ({e}); "
                        f"StorageReader(..., allow_pickle=True) for checkpoints you trust") from e
            return blob
        out = io.BytesIO()
        torch.save(decode(name, data, self.allow_pickle), out)
        return out.getvalue()

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return str(checkpoint_id).startswith(_SCHEME)
