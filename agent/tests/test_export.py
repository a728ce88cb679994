"""ckptctl export: a sharded checkpoint as safetensors, read back by a reader
written here from the format's specification (not the project's code) and
by the safetensors library itself, which must agree byte for byte; and a
Hugging Face model exported and loaded by transformers."""
import json
import os
import struct
import subprocess
import sys

import torch
from safetensors import safe_open

import ckpt

from test_multirank import run_ranks
import rank_worker

CKPTCTL = os.environ.get("CKPTCTL", os.path.join(os.path.dirname(__file__), "../../build/tools/ckptctl/ckptctl"))

# safetensors dtype -> torch dtype
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16, "I32": torch.int32,
          "I64": torch.int64, "BOOL": torch.bool}


def read_safetensors(path):
    """{name: tensor} and the metadata, checking the layout rules."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0, "header not padded to 8 bytes"
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__")
    body = data[8 + n:]
    tensors, end = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = info["data_offsets"]
        assert begin == end, f"{name}: a hole or overlap before it"
        end = stop
        raw = bytearray(body[begin:stop])
        dtype = DTYPES[info["dtype"]]
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.zeros(0, dtype=torch.uint8)
        tensors[name] = t.view(dtype).reshape(info["shape"])
    assert end == len(body), "bytes after the last tensor"
    check_with_library(path, tensors, metadata)
    return tensors, metadata


def check_with_library(path, tensors, metadata):
    """The safetensors library reads the same names, metadata, dtypes, shapes and bytes."""
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == metadata
        assert set(f.keys()) == set(tensors)
        for name, want in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == want.dtype and list(got.shape) == list(want.shape), name
            assert torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)), name


def expected():
    w, flat, emb = rank_worker.global_tensors()
    mask = (torch.arange(rank_worker.ROWS * rank_worker.COLS).reshape(rank_worker.ROWS, rank_worker.COLS) % 3) == 0
    return {"model.w": w, "model.emb": emb, "model.mask": mask, "model.ids": flat,
            "model.scale": torch.tensor(0.125), "model.empty": torch.zeros(0, 3),
            "optim.step": torch.tensor(3)}


def export(daemon, out, *extra):
    proc = subprocess.run([CKPTCTL, "export", "exp", "--storage-root", daemon.storage, "--out",
                           str(out), *extra], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_export_assembles_every_sharding_bit_exact(daemon, tmp_path):
    run_ranks("save_export", daemon.socket, "exp", 2)
    # A 64-byte buffer: every tensor streams through it in many pieces.
    export(daemon, tmp_path, "--max-shard-size", "1KB", "--buffer-size", "64B")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    want = expected()
    assert set(index["weight_map"]) == set(want)
    files = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert len(files) > 1 and all(f.endswith(f"-of-{len(files):05d}.safetensors") for f in files)
    got, total = {}, 0
    for name in files:
        tensors, metadata = read_safetensors(tmp_path / name)
        assert metadata == {"format": "pt"}
        for k, t in tensors.items():
            assert index["weight_map"][k] == name
            total += t.numel() * t.element_size()
        got.update(tensors)
    assert index["metadata"]["total_size"] == total
    for name, t in want.items():
        assert got[name].dtype == t.dtype and list(got[name].shape) == list(t.shape), name
        assert torch.equal(got[name].reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)), name
    assert not list(tmp_path.glob("*.tmp"))


def test_import_of_an_export_loads_resharded(daemon, tmp_path):
    run_ranks("save_export", daemon.socket, "exp", 2)
    export(daemon, tmp_path / "model", "--max-shard-size", "1KB")
    proc = subprocess.run([CKPTCTL, "--socket", daemon.socket, "import", str(tmp_path / "model"),
                           "imported", "1"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "imported 7 tensors" in proc.stdout, proc.stdout
    run_ranks("load_imported", daemon.socket, "imported", 3)


def test_import_refuses_damaged_files(daemon, tmp_path):
    run_ranks("save_export", daemon.socket, "exp", 2)
    model = tmp_path / "model"
    export(daemon, model)
    (path,) = list(model.glob("*.safetensors"))
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    cases = {
        "runs past the file": struct.pack("<Q", len(data)) + data[8:],
        "outside": None,  # an offset beyond the data, below
        "not a JSON object": data[:8] + b"[" + data[9:],
    }
    header["model.w"]["data_offsets"][1] += 4
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    cases["outside"] = struct.pack("<Q", len(text)) + text + data[8 + n:]
    for why, damaged in cases.items():
        bad = tmp_path / f"bad-{len(why)}"
        bad.mkdir()
        (bad / "model.safetensors").write_bytes(damaged)
        proc = subprocess.run([CKPTCTL, "--socket", daemon.socket, "import", str(bad), "bad", "1"],
                              capture_output=True, text=True)
        assert proc.returncode != 0 and "not a safetensors file" in proc.stderr, (why, proc.stderr)


def test_export_filters_and_renames(daemon, tmp_path):
    run_ranks("save_export", daemon.socket, "exp", 2)
    rename = tmp_path / "rename.json"
    rename.write_text(json.dumps({"^model\\.": "", "^w$": "lm_head.weight"}))
    out = tmp_path / "out"
    export(daemon, out, "latest", "--tensors", "^model\\.(w|emb)$", "--rename", str(rename))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == {"lm_head.weight", "emb"}
    tensors, _ = read_safetensors(out / index["weight_map"]["emb"])
    assert torch.equal(tensors["emb"], expected()["model.emb"])


def test_export_refuses_what_it_cannot_do(daemon, tmp_path):
    run_ranks("save_export", daemon.socket, "exp", 2)
    for extra, message in ((["99"], "99"), (["--tensors", "nothing-matches"], "no tensor"),
                           (["--max-shard-size", "lots"], "size")):
        proc = subprocess.run([CKPTCTL, "export", "exp", *extra, "--storage-root", daemon.storage,
                               "--out", str(tmp_path / "x")], capture_output=True, text=True)
        assert proc.returncode != 0 and message in proc.stderr, (extra, proc.stderr)
    rename = tmp_path / "clash.json"
    rename.write_text(json.dumps({".*": "same"}))
    proc = subprocess.run([CKPTCTL, "export", "exp", "--storage-root", daemon.storage, "--out",
                           str(tmp_path / "y"), "--rename", str(rename)], capture_output=True, text=True)
    assert proc.returncode != 0 and "both named same" in proc.stderr, proc.stderr


def test_transformers_loads_an_exported_model(daemon, tmp_path):
    """A Hugging Face model saved through ckpt, exported, and loaded by
    transformers' from_pretrained: every parameter bit-exact, same logits."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(5)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=96, n_positions=16,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    cp = ckpt.Checkpointer("hf", socket_path=daemon.socket)
    cp.save(1, {"model": model.state_dict()}, blocking=True).wait_persisted()
    rename = tmp_path / "rename.json"
    rename.write_text(json.dumps({"^model\\.": ""}))
    out = tmp_path / "hf"
    proc = subprocess.run([CKPTCTL, "export", "hf", "--storage-root", daemon.storage, "--out",
                           str(out), "--rename", str(rename)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for path in out.glob("*.safetensors"):
        read_safetensors(path)  # both readers agree on every file
    config.save_pretrained(out)
    loaded = GPT2LMHeadModel.from_pretrained(out).eval()
    want, got = model.state_dict(), loaded.state_dict()
    assert set(got) == set(want)
    for name, t in want.items():
        assert torch.equal(got[name].view(torch.uint8), t.view(torch.uint8)), name
    ids = torch.randint(0, config.vocab_size, (2, 16))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
