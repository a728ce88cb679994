"""Where a load's bytes came from, seen from Python (Checkpointer.last_load_sources):
one ckptd, a load from storage and one from its memory tier. The sources add
up to the bytes the load delivered, which are the state's own bytes."""

import torch

import ckpt
from ckpt.values import encode


def state(seed: int):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(128, 65, generator=g), "b": torch.randn(9, generator=g).half(),
            "epoch": seed}


def blank():
    return {"w": torch.zeros(128, 65), "b": torch.zeros(9).half(), "epoch": -1}


def state_bytes(s) -> int:
    """What a load of `s` delivers: the tensors' bytes and the object as stored."""
    return (s["w"].numel() * s["w"].element_size() + s["b"].numel() * s["b"].element_size()
            + len(encode("epoch", s["epoch"], False)))


def load_and_check(cp, step, source):
    target = blank()
    assert cp.load(step, target, source=source) == step
    want = state(step)
    assert torch.equal(target["w"].view(torch.uint8), want["w"].view(torch.uint8))
    assert torch.equal(target["b"].view(torch.uint8), want["b"].view(torch.uint8))
    assert target["epoch"] == step
    # Bytes delivered are counted by the client as it copies; the sources by
    # ckptd: both must be the state's bytes.
    assert cp.last_load_bytes == state_bytes(want)
    assert sum(s.bytes for s in cp.last_load_sources) == cp.last_load_bytes
    return cp.last_load_sources


def test_a_load_from_storage_says_storage(daemon):
    cp = ckpt.Checkpointer("from-disk", socket_path=daemon.socket)
    cp.save(3, state(3)).wait_persisted()
    sources = load_and_check(ckpt.Checkpointer("from-disk", socket_path=daemon.socket), 3, "any")
    assert len(sources) == 1, sources
    assert isinstance(sources[0], ckpt.LoadSource)
    assert sources[0].kind == "storage" and sources[0].host != ""


def test_a_load_from_memory_says_memory_and_durable_says_storage(tiered):
    cp = ckpt.Checkpointer("tiered", socket_path=tiered.socket)
    cp.save(4, state(4)).wait_persisted()
    cp.save(5, state(5), tier="memory").wait_persisted()
    loader = ckpt.Checkpointer("tiered", socket_path=tiered.socket)
    sources = load_and_check(loader, 5, "memory")
    assert loader.last_load_tiers == ["memory"]
    assert [s.kind for s in sources] == ["memory"], sources
    host = sources[0].host
    # A step in storage, on the same host: from storage.
    sources = load_and_check(loader, 4, "durable")
    assert [(s.kind, s.host) for s in sources] == [("storage", host)], sources
