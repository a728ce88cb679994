"""Checkpointer: one rank's connection to its host's ckptd."""
import functools
import os
import queue
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

import torch

from . import _ckpt
from ._ckpt import CheckpointError
from .dtensor import dtensor_shard, holds_part, is_dtensor
from .sharding import Shard
from .state import leaves, rebuild
from .values import decode, encode

# torch dtype -> ckpt.v1.DType (the on-disk numbering).
_DTYPES = {
    torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.float64: 4, torch.int8: 5,
    torch.uint8: 6, torch.int16: 7, torch.int32: 8, torch.int64: 9, torch.bool: 10,
}
for _name, _code in (("float8_e4m3fn", 11), ("float8_e5m2", 12)):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code


_DTYPES_BY_CODE = {code: dtype for dtype, code in _DTYPES.items()}


class TensorInfo(NamedTuple):
    dtype: torch.dtype
    shape: Tuple[int, ...]  # the global shape
    partial: bool  # the save did not cover all of it


class LoadSource(NamedTuple):
    """Bytes of a load from one source (Checkpointer.last_load_sources)."""
    kind: str  # "memory", "storage", "peer" (sent by another host) or "parity" (rebuilt)
    host: str  # the host that read or rebuilt them
    bytes: int


class Contents(NamedTuple):
    step: int
    tensors: Dict[str, TensorInfo]  # by stored name
    objects: Dict[str, int]  # stored name -> the rank that saved it, -1 for the job's


def _is_leaf(node) -> bool:
    return isinstance(node, (torch.Tensor, Shard))


def _held(leaf) -> bool:
    """Whether this rank holds any of a tensor leaf (not so for a DTensor
    on a mesh without this rank)."""
    return not is_dtensor(leaf) or holds_part(leaf)


def _target(leaf) -> torch.Tensor:
    """The tensor a load fills for a leaf."""
    if is_dtensor(leaf):
        return leaf._local_tensor
    return leaf.tensor if isinstance(leaf, Shard) else leaf


def _describe(name: str, leaf, keep: list) -> tuple:
    """The client's description of a tensor leaf; keep collects what must
    stay alive (and unchanged) until the snapshot is taken."""
    if is_dtensor(leaf):
        leaf = dtensor_shard(name, leaf)
    if isinstance(leaf, Shard):
        tensor, global_shape = leaf.tensor, list(leaf.global_shape)
        kind, offsets, lengths, flat_begin, flat_end = leaf.describe()
    else:
        tensor, global_shape = leaf, list(leaf.shape)
        kind, offsets, lengths, flat_begin, flat_end = "whole", [], [], 0, 0
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"{name}: dtype {tensor.dtype} is not one ckpt stores")
    if tensor.layout != torch.strided:
        raise TypeError(f"{name}: a {tensor.layout} tensor; only dense tensors are stored")
    tensor = tensor.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()  # the region's elements, packed
    keep.append(tensor)
    nbytes = tensor.numel() * tensor.element_size()
    return (name, _DTYPES[tensor.dtype], global_shape, kind, offsets, lengths, flat_begin,
            flat_end, tensor.data_ptr() if nbytes else 0, nbytes, tensor.is_cuda)


class SaveHandle:
    """A save in flight. wait_snapshot(): the tensors may change again.
    wait_persisted(): the checkpoint is committed. Both raise
    CheckpointError if the save failed."""

    def __init__(self, handle, keep: list, call_s: float = 0.0, blocking: bool = False):
        self._handle = handle
        self._keep = keep  # the tensors (or copies) the daemon copies from
        self.reported = False  # its failure reached the caller once
        # What the trainer stalled for this save: the save() call, then the
        # first wait that saw the snapshot taken (a blocking save's call
        # already did).
        self._stall_s = call_s
        self._snapshot_seen = blocking

    @property
    def step(self) -> int:
        return self._handle.step

    @property
    def stall_s(self) -> Optional[float]:
        """Seconds the trainer stalled for this save (the save() call plus
        the wait for its snapshot), once the snapshot was waited for; else
        None."""
        return self._stall_s if self._snapshot_seen else None

    def wait_snapshot(self) -> None:
        self._wait(self._handle.wait_snapshot)

    def wait_persisted(self) -> None:
        self._wait(self._handle.wait_persisted)

    def _wait(self, wait) -> None:
        start = time.monotonic()
        try:
            wait()
            if not self._snapshot_seen:
                self._stall_s += time.monotonic() - start
                self._snapshot_seen = True
        except _ckpt.CheckpointError:
            self.reported = True
            raise
        finally:
            self._keep = None


def tier_for_step(step: int, durable_every: Optional[int]) -> str:
    """The every-step policy: every step to memory, every durable_every-th
    also to storage (persisted from the memory copy). None: storage only."""
    if durable_every is None:
        return "durable"
    return "both" if durable_every > 0 and step % durable_every == 0 else "memory"


class Checkpointer:
    """Attaches to the local ckptd as one rank of a job.

    socket_path defaults to $CKPTD_SOCKET, else /run/ckptd/ckptd.sock.
    local_world_size: the job's ranks on this host (default: all of them);
    fewer when the job spans hosts, whose daemons then meet at the cluster's
    coordinator ($LOCAL_WORLD_SIZE as torchrun sets it is a good value).
    codec: how ckptd stores this job's chunks, "none", "zstd" or
    "grouped-zstd" (docs/compression.md); None: the daemon's --codec. Every
    rank on a host must pass the same.
    delta_every: step deltas on durable storage, a full step every K saves
    and the others stored as deltas against it (docs/compression.md); 1:
    every step full; None: the daemon's --delta_every.
    """

    def __init__(self, job: str, rank: int = 0, world_size: int = 1, *,
                 socket_path: Optional[str] = None, local_rank: Optional[int] = None,
                 copy_threads: int = 4, gpu_transfer: str = "pull",
                 local_world_size: int = 0, durable_every: Optional[int] = None,
                 codec: Optional[str] = None, delta_every: Optional[int] = None):
        if codec not in (None, "none", "zstd", "grouped-zstd"):
            raise ValueError(f"codec is 'none', 'zstd' or 'grouped-zstd', not {codec!r}")
        self._codec = codec or ""
        if delta_every is not None and (not isinstance(delta_every, int) or delta_every < 1):
            raise ValueError(f"delta_every is a step count of 1 or more, not {delta_every!r}")
        self._delta_every = delta_every or 0
        if gpu_transfer not in ("pull", "push"):
            raise ValueError(f"gpu_transfer is 'pull' or 'push', not {gpu_transfer!r}")
        socket_path = socket_path or os.environ.get("CKPTD_SOCKET", "/run/ckptd/ckptd.sock")
        self._client = _ckpt.Client(socket_path, job, rank, world_size,
                                    rank if local_rank is None else local_rank, copy_threads,
                                    gpu_transfer == "push", local_world_size)
        self._rank = rank
        if durable_every is not None and durable_every < 0:
            raise ValueError(f"durable_every is a step count, not {durable_every!r}")
        self._durable_every = durable_every
        # Where the last load's bytes came from, and the chunks it read from
        # storage after they failed verification in memory.
        self.last_load_tiers: List[str] = []
        self.last_load_fallback_chunks = 0
        # The bytes the last load delivered to this rank, and where they came
        # from (LoadSource); the sources' bytes add up to last_load_bytes.
        self.last_load_bytes = 0
        self.last_load_sources: List[LoadSource] = []
        self._last: Optional[SaveHandle] = None
        self._watcher = _PersistWatcher()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        watcher = getattr(self, "_watcher", None)
        if watcher is not None:
            watcher.stop()

    def save(self, step: int, state: Union[Dict[str, Any], List[Any]], *,
             blocking: bool = False, allow_pickle: bool = False, partial: bool = False,
             metadata: Optional[Dict[str, str]] = None,
             tier: Optional[str] = None) -> SaveHandle:
        """Starts a checkpoint of state (nested dicts and lists of tensors,
        Shards and values). Returns at once unless blocking; the tensors must
        not change until the handle's wait_snapshot() (wrap_optimizer does it
        for you). Raises the previous save's failure if it failed since.

        tier: "durable" (storage), "memory" (ckptd's memory tier: survives
        this process, not the daemon) or "both" (memory, then persisted to
        storage from that copy in the background). None: the policy given as
        durable_every (memory every step, both every K-th), else durable."""
        if tier is None:
            tier = tier_for_step(step, self._durable_every)
        tensors, objects, keep = [], [], []
        for name, leaf, _ in leaves(state, _is_leaf):
            if _is_leaf(leaf):
                if _held(leaf):
                    tensors.append(_describe(name, leaf, keep))
            else:
                # Rank 0's values are the job's (global), the others' their
                # own: a load by a rank that did not save (a larger world)
                # then gets rank 0's, and every other rank its own.
                objects.append((name, encode(name, leaf, allow_pickle), self._rank == 0))
        return self._submit(step, tensors, objects, keep, blocking=blocking, partial=partial,
                            metadata=metadata, tier=tier)

    def _submit(self, step: int, tensors: list, objects: list, keep: list, *,
                blocking: bool = False, partial: bool = False,
                metadata: Optional[Dict[str, str]] = None, tier: str = "durable") -> SaveHandle:
        """A save of described tensors and (name, bytes, global) objects."""
        last, self._last = self._last, None
        if last is not None and not last.reported:
            # Saves run in order: the previous one's snapshot precedes this
            # one's anyway, and waiting for it here raises its failure now.
            last.wait_snapshot()
        self._watcher.raise_failure()
        stream = 0
        if any(t[-1] for t in tensors):
            stream = torch.cuda.current_stream().cuda_stream
        start = time.monotonic()
        raw = self._client.save(int(step), tensors, objects, blocking, partial, stream,
                                dict(metadata or {}), tier, self._codec, self._delta_every)
        handle = SaveHandle(raw, keep, time.monotonic() - start, blocking)
        self._last = handle
        self._watcher.watch(handle)
        return handle

    def wait_snapshot(self) -> None:
        """Waits for the last save's snapshot (nothing to do without one)."""
        if self._last is not None:
            self._last.wait_snapshot()

    def load(self, step: Union[int, str], state: Union[Dict[str, Any], List[Any]], *,
             allow_pickle: bool = False, source: str = "any"):
        """Fills state from a checkpoint ("latest" or a step): tensors in
        place, in their current sharding; values replaced in their dicts and
        lists. Returns the step loaded. (Tuples cannot change in place: use
        load_state() to get a state with them rebuilt.)

        source: "any" (the fastest tier with the step; "latest" is the step
        committed last in any tier, a rollback included), "memory" or
        "durable". last_load_tiers says where
        the bytes came from; last_load_sources, from which host and how
        (memory, storage, peer, parity), summing to last_load_bytes."""
        return self.load_state(step, state, allow_pickle=allow_pickle, source=source)[0]

    def load_state(self, step, state, *, allow_pickle: bool = False, source: str = "any"):
        """load(), returning (step loaded, state with tuples rebuilt)."""
        found = leaves(state, _is_leaf)
        tensor_leaves = [(name, leaf) for name, leaf, _ in found
                         if _is_leaf(leaf) and _held(leaf)]
        setters = [(name, setter) for name, leaf, setter in found if not _is_leaf(leaf)]
        loaded, values = self._load_raw(step, tensor_leaves, [name for name, _ in setters],
                                        source)
        for name, setter in setters:
            setter(decode(name, values[name], allow_pickle))
        return loaded, rebuild(state, found)

    def _load_raw(self, step, tensor_leaves: list, keys: list, source: str = "any"):
        """Fills (name, tensor, Shard or DTensor) leaves in place; returns
        (step loaded, {key: the object's bytes as stored})."""
        want = _ckpt.LATEST if step == "latest" else int(step)
        tensors, targets, keep = [], [], []
        for name, leaf in tensor_leaves:
            tensors.append(_describe(name, leaf, keep))
            # A copy was described when the tensor is not contiguous: copy back.
            targets.append((_target(leaf), keep[-1]))
        loaded, values, tiers, fallbacks, delivered, sources = self._client.load(
            want, tensors, keys, source)
        self.last_load_tiers = list(tiers)
        self.last_load_fallback_chunks = fallbacks
        self.last_load_bytes = delivered
        self.last_load_sources = [LoadSource(*s) for s in sources]
        with torch.no_grad():
            for target, filled in targets:
                if filled.data_ptr() != target.data_ptr():  # a packed copy was filled
                    target.copy_(filled)
        return loaded, values

    def contents(self, step: Union[int, str] = "latest") -> "Contents":
        """What a checkpoint holds (from its manifest; no other rank takes
        part): its step, each tensor's dtype and global shape, the objects."""
        want = _ckpt.LATEST if step == "latest" else int(step)
        loaded, tensors, objects = self._client.describe(want)
        described = {}
        for fqn, code, shape, partial in tensors:
            dtype = _DTYPES_BY_CODE.get(code)
            if dtype is None:
                raise CheckpointError(f"{fqn}: dtype code {code} is not one this torch has")
            described[fqn] = TensorInfo(dtype, tuple(shape), partial)
        return Contents(loaded, described, {key: rank for key, rank in objects})

    def wrap_optimizer(self, optimizer: "torch.optim.Optimizer") -> "torch.optim.Optimizer":
        """From now on optimizer.step() first waits for the last save's
        snapshot, so a lazy save never captures half-updated weights.

        The instance's step is wrapped, not hooked: torch 2's step pre-hooks
        fire once per class in the chain, so an optimizer subclass whose
        step() calls super().step() would wait twice per step."""
        step = optimizer.step

        @functools.wraps(step)
        def waiting_step(*args, **kwargs):
            self.wait_snapshot()
            return step(*args, **kwargs)
        optimizer.step = waiting_step
        return optimizer

    def close(self) -> None:
        """Waits for the saves in flight to commit (raising the first failure
        not raised yet) and detaches from the daemon."""
        self._watcher.stop()
        self._watcher.join()
        self._client = None
        self._watcher.raise_failure()


class _PersistWatcher:
    """Waits for each save to commit, in order (saves commit in order), so a
    background failure surfaces at the next save. Holds no reference to the
    Checkpointer: dropping that detaches from the daemon."""

    def __init__(self):
        self._queue: "queue.Queue[Optional[SaveHandle]]" = queue.Queue()
        self._failed: List[tuple] = []  # (handle, error), in save order
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ckpt-persist", daemon=True)
        self._thread.start()

    def watch(self, handle: SaveHandle) -> None:
        self._queue.put(handle)

    def stop(self) -> None:
        self._queue.put(None)

    def join(self) -> None:
        self._thread.join()

    def raise_failure(self) -> None:
        """Raises the first failure the caller has not seen yet, once."""
        with self._lock:
            while self._failed and self._failed[0][0].reported:
                self._failed.pop(0)
            if not self._failed:
                return
            handle, error = self._failed.pop(0)
            handle.reported = True
        raise error

    def _run(self) -> None:
        while True:
            handle = self._queue.get()
            if handle is None:
                return
            try:
                handle._handle.wait_persisted()
            except _ckpt.CheckpointError as e:
                with self._lock:
                    self._failed.append((handle, e))


def init_optimizer_state(optimizer: "torch.optim.Optimizer") -> None:
    """Creates an optimizer's state before its first step, so that a fresh
    optimizer's state_dict() has the tensors a load fills: one step with
    zero gradients at learning rate 0 (the parameters do not change; what
    the step sets, the load then overwrites)."""
    rates = [group["lr"] for group in optimizer.param_groups]
    try:
        for group in optimizer.param_groups:
            group["lr"] = 0.0
            for p in group["params"]:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
        optimizer.step()
    finally:
        for group, lr in zip(optimizer.param_groups, rates):
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
