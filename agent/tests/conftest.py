"""A real ckptd for the agent's tests: its own storage root and socket."""
import gc
import os
import subprocess
import tempfile

import pytest

CKPTD = os.environ.get("CKPTD", os.path.join(os.path.dirname(__file__), "../../build/daemon/ckptd"))


class Daemon:
    def __init__(self, root: str, pool_bytes: int = 64 << 20, flags=()):
        self.root = root
        self.flags = list(flags)  # after the defaults: the last of a flag wins
        self.socket = os.path.join(root, "ckptd.sock")
        self.storage = os.path.join(root, "storage")
        self.pool_bytes = pool_bytes
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [CKPTD, f"--storage_root={self.storage}", f"--socket_path={self.socket}",
             f"--pool_bytes={self.pool_bytes}", "--writer_threads=2",
             # A rank that never arrives fails the others in seconds, not 2 min.
             "--reader_threads=1", "--plan_timeout_s=5", *self.flags],
            stderr=subprocess.PIPE, text=True)
        # Started once it says so (not a sleep): the line is printed after
        # the socket listens.
        for line in self.proc.stderr:
            if "ckptd: serving" in line:
                break
        else:
            raise RuntimeError(f"ckptd exited with {self.proc.wait()} before serving")
        # Keep draining its log so it never blocks on a full pipe.
        self._drain = __import__("threading").Thread(
            target=lambda: [None for _ in self.proc.stderr], daemon=True)
        self._drain.start()
        return self

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def daemon():
    with tempfile.TemporaryDirectory(prefix="ckpt-agent-") as root:
        d = Daemon(root).start()
        try:
            yield d
        finally:
            # Checkpointers a test left behind (a traceback can hold one)
            # detach first, so ckptd has no rank to wait for as it stops.
            gc.collect()
            d.stop()


@pytest.fixture
def tiered():
    """A ckptd with a 64 MiB memory tier."""
    with tempfile.TemporaryDirectory(prefix="ckpt-agent-") as root:
        d = Daemon(root, flags=[f"--memory_tier_bytes={64 << 20}"]).start()
        try:
            yield d
        finally:
            d.stop()
