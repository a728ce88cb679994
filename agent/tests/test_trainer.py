"""The example trainer, SIGKILLed mid-run and resumed, ends bit-identical
to a run that was never interrupted."""
import json
import os
import signal
import subprocess
import sys
import threading

TRAINER = os.path.join(os.path.dirname(__file__), "../examples/train_lm.py")


def trainer(daemon, job, *extra):
    return [sys.executable, TRAINER, "--socket", daemon.socket, "--job", job, "--world", "2",
            "--steps", "12", "--every", "4", *extra]


def test_killed_and_resumed_equals_uninterrupted(daemon, tmp_path):
    whole = tmp_path / "whole.json"
    subprocess.run(trainer(daemon, "lm-whole", "--out", str(whole)), check=True, timeout=300,
                   capture_output=True)

    # Killed (the whole process group, SIGKILL) once rank 0 reports step 10:
    # the checkpoint of step 8 is committed or in flight. The ranks halt
    # there, so the kill always lands mid-run (on a busy machine the last
    # steps could otherwise finish before it).
    proc = subprocess.Popen(trainer(daemon, "lm-killed", "--halt-after", "10"),
                            stdout=subprocess.PIPE, start_new_session=True)
    # Raw reads, and the marker looked for anywhere: the two ranks share the
    # pipe, and a line of one can land inside a line of the other (a missed
    # line once let the trainer finish before the kill). A trainer that
    # never gets to step 10 is killed by the watchdog, which ends the reads
    # with a clear failure well inside ctest's timeout.
    watchdog = threading.Timer(120, lambda: os.killpg(proc.pid, signal.SIGKILL))
    watchdog.start()
    output = b""
    while b"rank 0 step 10 " not in output:
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        output += chunk
    watchdog.cancel()
    assert b"rank 0 step 10 " in output, output[-2000:].decode(errors="replace")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    resumed = tmp_path / "resumed.json"
    out = subprocess.run(trainer(daemon, "lm-killed", "--resume", "--out", str(resumed)),
                         check=True, timeout=300, capture_output=True, text=True).stdout
    assert "rank 0 resumed from step 8" in out or "rank 0 resumed from step 4" in out, out
    assert json.loads(resumed.read_text()) == json.loads(whole.read_text())
