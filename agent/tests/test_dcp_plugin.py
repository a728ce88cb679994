"""ckpt.dcp in one process (DCP without a process group): the casts DCP
makes on load, values both ways, the pickle rules, and clear errors for bad
ids and absent steps. Many-rank worlds are in dist/test_dtensor.py."""
import pytest
import torch
import torch.distributed.checkpoint as dcp

import ckpt
from ckpt.dcp import StorageReader, StorageWriter, parse_checkpoint_id

class Opaque:
    """A value only pickle stores."""

    def __init__(self, v):
        self.v = v


def failure_text(error) -> str:
    """What failed, also inside DCP's CheckpointException (rank -> (error,
    traceback))."""
    failures = getattr(error, "failures", None)
    if not failures:
        return str(error)
    return " ".join(str(f[0] if isinstance(f, tuple) else f) for f in failures.values())


def raises_naming(fn, *words):
    # DCP raises CheckpointException, a BaseException.
    with pytest.raises(BaseException) as raised:
        fn()
    text = failure_text(raised.value)
    for word in words:
        assert word in text, text


def writer(daemon, id_):
    return StorageWriter(id_, socket_path=daemon.socket)


def reader(daemon, id_, **kwargs):
    return StorageReader(id_, socket_path=daemon.socket, **kwargs)


def test_a_load_casts_to_the_callers_dtype_as_dcp_does(daemon):
    torch.manual_seed(0)
    saved = {"w": torch.randn(5, 3), "n": torch.arange(6, dtype=torch.int32)}
    dcp.save(saved, storage_writer=writer(daemon, "ckpt://cast/1"))
    into = {"w": torch.zeros(5, 3, dtype=torch.bfloat16), "n": torch.zeros(6, dtype=torch.int64)}
    dcp.load(into, storage_reader=reader(daemon, "ckpt://cast/1"))
    assert torch.equal(into["w"], saved["w"].to(torch.bfloat16))
    assert torch.equal(into["n"], saved["n"].to(torch.int64))


def test_values_cross_between_checkpointer_and_dcp(daemon):
    cp = ckpt.Checkpointer("values", socket_path=daemon.socket)
    cp.save(1, {"t": torch.ones(2), "epoch": 7, "name": "run", "blob": b"\x00\x01"}
            ).wait_persisted()
    into = {"t": torch.zeros(2), "epoch": 0, "name": "", "blob": b""}
    dcp.load(into, storage_reader=reader(daemon, "ckpt://values/1"))
    assert into == {"t": into["t"], "epoch": 7, "name": "run", "blob": b"\x00\x01"}
    assert torch.equal(into["t"], torch.ones(2))

    dcp.save({"t": torch.full((2,), 3.0), "lr": 0.25, "betas": (0.9, 0.99)},
             storage_writer=writer(daemon, "ckpt://values/2"))
    back = {"t": torch.zeros(2), "lr": 0.0, "betas": None}
    assert cp.load(2, back) == 2
    assert back["lr"] == 0.25 and tuple(back["betas"]) == (0.9, 0.99)
    cp.close()


def test_values_that_need_pickle_are_refused_unless_allowed(daemon):
    # Saved by DCP (its bytes are torch.save's pickle) and by Checkpointer
    # with allow_pickle: dcp.load through ckpt unpickles neither by default.
    dcp.save({"p": Opaque(1)}, storage_writer=writer(daemon, "ckpt://pickled/1"))
    cp = ckpt.Checkpointer("pickled", socket_path=daemon.socket)
    cp.save(2, {"p": Opaque(2)}, allow_pickle=True).wait_persisted()
    for step in (1, 2):
        raises_naming(lambda: dcp.load({"p": None}, storage_reader=reader(
            daemon, f"ckpt://pickled/{step}")), "p:", "allow_pickle")
        into = {"p": None}
        dcp.load(into, storage_reader=reader(daemon, f"ckpt://pickled/{step}",
                                             allow_pickle=True))
        assert isinstance(into["p"], Opaque) and into["p"].v == step
    cp.close()


def test_bad_ids_and_absent_steps_are_named():
    for bad in ("/tmp/x", "ckpt://", "ckpt://job", "ckpt://job/-3", "ckpt://job/ten"):
        with pytest.raises(ValueError, match="checkpoint id"):
            parse_checkpoint_id(bad)
    assert parse_checkpoint_id("ckpt://a/b/12") == ("a/b", 12)
    with pytest.raises(ValueError, match="step number"):
        StorageWriter("ckpt://job/latest")
    assert StorageWriter.validate_checkpoint_id("ckpt://j/1")
    assert not StorageReader.validate_checkpoint_id("/data/ckpt")


def test_an_absent_step_fails_the_load_naming_it(daemon):
    dcp.save({"t": torch.ones(1)}, storage_writer=writer(daemon, "ckpt://absent/1"))
    raises_naming(lambda: dcp.load({"t": torch.zeros(1)}, storage_reader=reader(
        daemon, "ckpt://absent/9")), "NOT_FOUND", "job absent", "step 9")
    raises_naming(lambda: dcp.load({"t": torch.zeros(1)}, storage_reader=reader(
        daemon, "ckpt://nobody/latest")), "NOT_FOUND", "job nobody")


def test_a_save_to_a_committed_step_is_refused(daemon):
    dcp.save({"t": torch.ones(1)}, storage_writer=writer(daemon, "ckpt://twice/1"))
    raises_naming(lambda: dcp.save({"t": torch.zeros(1)}, storage_writer=writer(
        daemon, "ckpt://twice/1")), "ALREADY_EXISTS", "step 1")
    into = {"t": torch.zeros(1)}
    dcp.load(into, storage_reader=reader(daemon, "ckpt://twice/1"))
    assert torch.equal(into["t"], torch.ones(1))
