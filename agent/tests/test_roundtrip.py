"""One rank: every dtype and kind of leaf comes back bit for bit."""
import math
import os
import subprocess
from fractions import Fraction

import numpy
import pytest
import safetensors.torch
import torch

import ckpt

CKPTCTL = os.environ.get("CKPTCTL", os.path.join(os.path.dirname(__file__), "../../build/tools/ckptctl/ckptctl"))


def as_bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def make_state():
    g = torch.Generator().manual_seed(7)
    state = {
        "model": {
            "layers.0.weight": torch.randn(33, 17, generator=g),
            "layers.0.bias": torch.randn(17, generator=g).to(torch.bfloat16),
            "half": torch.randn(5, 3, generator=g).half(),
            "double": torch.randn(4, dtype=torch.float64, generator=g),
            "scalar": torch.tensor(3.25),                     # 0-d
            "empty": torch.zeros(0, 4),                       # zero-size
            "transposed": torch.randn(6, 9, generator=g).t(),  # not contiguous
        },
        "optim": {
            "step": torch.tensor(1234, dtype=torch.int64),
            "ids": torch.randint(-2**31, 2**31 - 1, (11,), dtype=torch.int32, generator=g),
            "bytes": torch.randint(0, 255, (13,), dtype=torch.uint8, generator=g),
            "small": torch.randint(-128, 127, (7,), dtype=torch.int8, generator=g),
            "shorts": torch.randint(-30000, 30000, (7,), dtype=torch.int16, generator=g),
            "mask": torch.rand(10, generator=g) > 0.5,
            "groups": [{"lr": 0.001, "betas": (0.9, 0.999), "params": [0, 1, 2]}],
        },
        "extra": {
            "epoch": 3, "big": 2**80, "nan": float("nan"), "inf": float("-inf"),
            "negzero": -0.0, "name": "llama-8b ✓", "blob": b"\x00\xffraw", "none": None,
            "flag": True, "array": numpy.arange(12, dtype=numpy.float32).reshape(3, 4),
            "rng": torch.get_rng_state(),
        },
    }
    return state


def blank(state):
    """The same structure with every tensor zeroed and every value changed."""
    def walk(node):
        if isinstance(node, torch.Tensor):
            return torch.zeros_like(node) if node.is_contiguous() else torch.zeros_like(node.t()).t()
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, tuple):
            return tuple(walk(v) for v in node)
        return "placeholder"
    return walk(state)


def same(a, b, path="state"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert as_bytes(a) == as_bytes(b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) == type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}.{i}")
    elif isinstance(a, float):
        assert isinstance(b, float), path
        assert (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b)), path
    elif isinstance(a, numpy.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), path
    else:
        assert type(a) == type(b) and a == b, path


def test_every_dtype_and_value_round_trips(daemon):
    cp = ckpt.Checkpointer("roundtrip", socket_path=daemon.socket)
    state = make_state()
    cp.save(5, state, blocking=True).wait_persisted()
    target = blank(state)
    step, restored = cp.load_state("latest", target)
    assert step == 5
    same(state, restored)
    # In place: the very tensors of the target were filled.
    assert as_bytes(target["model"]["layers.0.weight"]) == as_bytes(state["model"]["layers.0.weight"])
    assert as_bytes(target["model"]["transposed"]) == as_bytes(state["model"]["transposed"])


def test_latest_is_the_newest_save_and_a_step_can_be_named(daemon):
    cp = ckpt.Checkpointer("steps", socket_path=daemon.socket)
    for step in (1, 2):
        cp.save(step, {"w": torch.full((8,), float(step))}).wait_persisted()
    w = {"w": torch.zeros(8)}
    assert cp.load("latest", w) == 2 and torch.equal(w["w"], torch.full((8,), 2.0))
    assert cp.load(1, w) == 1 and torch.equal(w["w"], torch.full((8,), 1.0))


def test_no_pickle_unless_asked_on_both_sides(daemon):
    cp = ckpt.Checkpointer("pickle", socket_path=daemon.socket)
    with pytest.raises(ckpt.PickleRefused, match="extra.obj"):
        cp.save(1, {"extra": {"obj": Fraction(1, 3)}})
    cp.save(2, {"extra": {"obj": Fraction(2, 3)}}, allow_pickle=True).wait_persisted()
    state = {"extra": {"obj": None}}
    with pytest.raises(ckpt.PickleRefused, match="extra.obj"):
        cp.load(2, state)
    cp.load(2, state, allow_pickle=True)
    assert state["extra"]["obj"] == Fraction(2, 3)


def test_wrapped_optimizer_step_waits_for_the_snapshot(daemon):
    cp = ckpt.Checkpointer("optim", socket_path=daemon.socket)
    # 64 MiB through a 64 MiB pool: the snapshot streams, so it is still
    # being taken when step() is called.
    weight = torch.nn.Parameter(torch.arange(1 << 24, dtype=torch.float32))
    opt = cp.wrap_optimizer(torch.optim.SGD([weight], lr=1.0))
    before = weight.detach().clone()
    handle = cp.save(1, {"w": weight})  # lazy: returns before the copy is done
    weight.grad = torch.ones_like(weight)
    opt.step()                          # must wait for the snapshot first
    handle.wait_persisted()
    assert not torch.equal(weight.detach(), before)
    restored = {"w": torch.zeros_like(before)}
    cp.load(1, restored)
    assert torch.equal(restored["w"], before)


def test_wrapped_optimizer_waits_before_it_steps(daemon):
    cp = ckpt.Checkpointer("order", socket_path=daemon.socket)
    order = []
    cp.wait_snapshot = lambda: order.append("wait")

    class Recording(torch.optim.SGD):
        def step(self, closure=None):
            order.append("step")
            return super().step(closure)

    weight = torch.nn.Parameter(torch.ones(4))
    opt = cp.wrap_optimizer(Recording([weight], lr=1.0))
    weight.grad = torch.ones(4)
    opt.step()
    opt.step()
    assert order == ["wait", "step", "wait", "step"]


def test_errors_carry_the_daemons_message(daemon):
    cp = ckpt.Checkpointer("errors", socket_path=daemon.socket)
    cp.save(1, {"w": torch.ones(4)}).wait_persisted()
    with pytest.raises(ckpt.CheckpointError) as e:
        cp.load(99, {"w": torch.zeros(4)})
    assert "99" in str(e.value)
    with pytest.raises(ckpt.CheckpointError) as e:
        cp.load(1, {"w": torch.zeros(5)})  # a shape the checkpoint does not have
    assert "w" in str(e.value) and e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ckpt.CheckpointError) as e:
        cp.load(1, {"w": torch.zeros(4, dtype=torch.float64)})  # another dtype
    assert "w" in str(e.value) and e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ValueError, match="both named"):
        cp.save(2, {"a.b": torch.ones(1), "a": {"b": torch.ones(1)}})


def test_a_failed_background_save_raises_from_the_next_save(daemon):
    cp = ckpt.Checkpointer("background", socket_path=daemon.socket)
    cp.save(1, {"w": torch.ones(4)}).wait_persisted()
    cp.save(1, {"w": torch.ones(4)})  # lazy, and step 1 is committed already: it fails
    with pytest.raises(ckpt.CheckpointError) as e:
        cp.save(2, {"w": torch.ones(4)})
    assert e.value.code == "ALREADY_EXISTS" and "step 1" in str(e.value)
    cp.save(3, {"w": torch.ones(4)}).wait_persisted()  # and the next one works


def test_no_daemon_fails_instead_of_hanging(tmp_path):
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.Checkpointer("nobody", socket_path=str(tmp_path / "none.sock"))
    assert e.value.code == "UNAVAILABLE"


def test_a_daemon_that_dies_fails_the_next_save(daemon):
    cp = ckpt.Checkpointer("dies", socket_path=daemon.socket)
    cp.save(1, {"w": torch.ones(4)}).wait_persisted()
    daemon.kill()
    with pytest.raises(ckpt.CheckpointError):
        cp.save(2, {"w": torch.ones(4)}).wait_persisted()


def test_optimizer_state_dict_round_trips_into_a_fresh_optimizer(daemon):
    torch.manual_seed(3)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    for _ in range(3):
        model(torch.randn(5, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    cp = ckpt.Checkpointer("optimizer", socket_path=daemon.socket)
    cp.save(1, {"model": model.state_dict(), "optim": opt.state_dict()}).wait_persisted()

    fresh_model = torch.nn.Linear(8, 4)
    before = {k: v.clone() for k, v in fresh_model.state_dict().items()}
    fresh = torch.optim.AdamW(fresh_model.parameters(), lr=0.5, weight_decay=0.0)
    ckpt.init_optimizer_state(fresh)
    for k, v in fresh_model.state_dict().items():
        assert torch.equal(v, before[k]), f"init changed {k}"  # lr 0: nothing moves
    state = {"model": fresh_model.state_dict(), "optim": fresh.state_dict()}
    cp.load(1, state)
    fresh.load_state_dict(state["optim"])
    same(opt.state_dict(), fresh.state_dict())
    same(model.state_dict(), fresh_model.state_dict())


@pytest.mark.parametrize("codec", ["zstd", "grouped-zstd"])
def test_every_dtype_round_trips_through_a_codec(daemon, codec, tmp_path):
    # Special values too: the codecs move bytes, never floats.
    state = make_state()
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 1e-45, -1e-45])
    state["model"]["special"] = special.repeat(500)
    state["model"]["special_bf16"] = special.to(torch.bfloat16).repeat(500)
    # A NaN with a payload, which no float arithmetic would keep.
    state["model"]["payload"] = torch.tensor([0x7fc00123, -0x7fc0] * 300, dtype=torch.int32).view(
        torch.float32)
    cp = ckpt.Checkpointer("codec-" + codec, socket_path=daemon.socket, codec=codec)
    cp.save(1, state, allow_pickle=True).wait_persisted()
    restored = blank(state)
    cp.load(1, restored, allow_pickle=True)
    same(state, restored)
    # The writers did encode (the manifest says so), and an export decodes.
    inspect = subprocess.run([CKPTCTL, "--socket", daemon.socket, "inspect", "codec-" + codec, "1"],
                             capture_output=True, text=True, check=True)
    wanted = {"zstd": "CHUNK_CODEC_ZSTD", "grouped-zstd": "CHUNK_CODEC_GROUPED_ZSTD"}[codec]
    assert wanted in inspect.stdout
    out = tmp_path / "export"
    subprocess.run([CKPTCTL, "export", "codec-" + codec, "--storage-root", daemon.storage,
                    "--out", str(out)], capture_output=True, text=True, check=True)
    exported = {}
    for f in out.glob("*.safetensors"):
        exported.update(safetensors.torch.load_file(str(f)))
    for name in ("layers.0.weight", "special", "special_bf16", "payload"):
        assert as_bytes(exported["model." + name]) == as_bytes(state["model"][name]), name


def test_an_unknown_codec_is_refused_before_any_save(daemon):
    with pytest.raises(ValueError, match="codec"):
        ckpt.Checkpointer("bad-codec", socket_path=daemon.socket, codec="lz4")
