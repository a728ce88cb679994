"""Launching fsdp_worker.py under torchrun, killing it, reading what it wrote."""
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import torch

import ckpt

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fsdp_worker.py")
STEPS, HALT = 6, 3  # train to STEPS; the killed runs stop at HALT
TIMEOUT_S = 120


@dataclass
class Result:
    losses: List[str]  # "step loss-of-rank-0 loss-of-rank-1 ..." (float.hex), a line per step
    final: Dict  # the gathered model and optimizer state at the end ({} for a killed run)
    resumed_from: int  # the step a resume loaded (0: not resumed)


def _command(nproc: int, out: Path, args) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", "--monitor-interval=0.1", WORKER,
            "--out", str(out), "--steps", str(STEPS), *map(str, args)]


def _env() -> Dict[str, str]:
    # The workers import the ckpt this test imported.
    agent = os.path.dirname(os.path.dirname(os.path.abspath(ckpt.__file__)))
    path = os.pathsep.join(p for p in (agent, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)


def _stop(proc: subprocess.Popen) -> None:
    """Ends a torchrun that is still running: SIGTERM first, which it passes
    on to its workers (each in a session of its own), then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _read(out: Path) -> Result:
    losses = (out / "losses.txt").read_text().splitlines()
    final = out / "final.pt"
    resumed = out / "resumed_from"
    return Result(losses, torch.load(final, weights_only=True) if final.exists() else {},
                  int(resumed.read_text()) if resumed.exists() else 0)


def run(nproc: int, out: Path, *args) -> Result:
    """A run to the last step."""
    out.mkdir()
    proc = subprocess.Popen(_command(nproc, out, args), env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise AssertionError(f"torchrun {nproc} ranks {args}: still running after "
                             f"{TIMEOUT_S} s\n" + proc.communicate()[1][-6000:])
    finally:
        _stop(proc)
    assert proc.returncode == 0, f"torchrun {nproc} ranks {args}: exit {proc.returncode}\n" + \
        err[-6000:]
    return _read(out)


def run_killed(nproc: int, out: Path, *args) -> Result:
    """A run whose ranks are SIGKILLed once step HALT's save is committed
    (every rank has said so), the way a node failure ends them."""
    out.mkdir()
    proc = subprocess.Popen(_command(nproc, out, [*args, "--halt-at", HALT]), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = []
    drain = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    drain.start()
    # A run that never gets there is stopped by the watchdog, which ends
    # the reads below with a clear failure.
    watchdog = threading.Timer(TIMEOUT_S, lambda: _stop(proc))
    watchdog.start()
    try:
        said = b""
        wanted = [f"committed rank {r}\n".encode() for r in range(nproc)]
        while not all(w in said for w in wanted):
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            said += chunk
        if not all(w in said for w in wanted):
            _stop(proc)
            drain.join()
            raise AssertionError(f"torchrun {nproc} ranks {args} ended before step {HALT} was "
                                 f"committed: exit {proc.returncode}\n"
                                 + b"".join(err).decode(errors="replace")[-6000:])
        for r in range(nproc):
            pid = int((out / f"committed.{r}").read_text())
            os.killpg(pid, signal.SIGKILL)  # the worker leads its own session
        proc.wait(timeout=TIMEOUT_S)
        drain.join()
    finally:
        watchdog.cancel()
        _stop(proc)
    log = b"".join(err).decode(errors="replace")
    assert proc.returncode != 0 and "SIGKILL" in log, log[-6000:]
    return _read(out)


def tensor_bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_same_state(got, want, path="state") -> None:
    """got and want have one structure, values equal and tensors equal byte
    for byte (dtype and shape too)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{path}: {type(got).__name__}, not a tensor"
        assert (got.dtype, got.shape) == (want.dtype, want.shape), \
            f"{path}: {got.dtype} {list(got.shape)} != {want.dtype} {list(want.shape)}"
        if tensor_bytes(got) != tensor_bytes(want):
            diff = (got.double() - want.double()).abs().max().item()
            raise AssertionError(f"{path}: bytes differ (largest difference {diff})")
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), \
            f"{path}: keys {sorted(got) if isinstance(got, dict) else got} != {sorted(want)}"
        for k in want:
            assert_same_state(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{path}: {got} != {want}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_state(g, w, f"{path}.{i}")
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"
