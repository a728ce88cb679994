"""DTensors saved from one mesh and placements, loaded into others, through
Checkpointer and through torch.distributed.checkpoint with ckpt's plugin:
every local shard byte for byte what torch's own distribute_tensor makes.

Starting a world of processes costs most of the time here (each imports
torch), so one world of 4 saves every way, once for the module, and each
test's world checks many steps (dtensor_worker.py: its error names the
step and the way)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import Daemon
from world import run_world

WORKER = os.path.join(os.path.dirname(__file__), "dtensor_worker.py")
CKPTCTL = os.environ.get(
    "CKPTCTL", os.path.join(os.path.dirname(__file__), "../../../build/tools/ckptctl/ckptctl"))
JOB = "dt"


def ranks(daemon, layout, world, *actions):
    run_world(WORKER, world, [daemon.socket, JOB, layout, *actions])


def import_dcp(daemon, *flags):
    fs_dir = os.path.join(os.path.dirname(daemon.socket), f"fs-{JOB}-3")
    return subprocess.run([sys.executable, "-m", "ckpt.import_dcp", fs_dir, JOB, "30",
                           f"--socket={daemon.socket}", *flags], capture_output=True, text=True)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A daemon holding what a 2x2 mesh saved (uneven, empty and strided
    shards, five dtypes): 1 and 7 by Checkpointer, 5 by dcp.save, 11-14 by
    dcp.async_save (threads; a process, seed 112; one writer given ids
    twice), each overwritten the moment async_save returned; 30 imported
    from DCP's own FileSystemWriter (seed 3); 40 from a mesh of ranks 0 and 1
    only; 50 (Checkpointer) and 51 (dcp.save) from a 3-D mesh of 2x1x2. A
    Partial DTensor was refused."""
    daemon = Daemon(str(tmp_path_factory.mktemp("dtensor"))).start()
    try:
        ranks(daemon, "mesh2x2", 4, "save:1", "partial:9", "dcp_save:5", "save:7",
              "dcp_async:11", "dcp_async_process:12:112", "dcp_async_reuse:13", "fs_save:3", "stage_save:40", "save:50@mesh2x1x2",
              "dcp_save:51@mesh2x1x2")
        refused = import_dcp(daemon)
        assert refused.returncode == 2 and "--allow-pickle" in refused.stderr, refused.stderr
        done = import_dcp(daemon, "--allow-pickle")
        assert done.returncode == 0, done.stderr
        yield daemon
    finally:
        daemon.stop()


def test_replicated_placements_are_stored_once(saved):
    # On the 2x2 mesh "e" is Replicate() twice (4 holders), "d" Shard(2) on
    # the second dimension (2 distinct boxes, 2 holders each).
    manifest = json.loads(subprocess.run(
        [CKPTCTL, f"--socket={saved.socket}", "inspect", JOB, "7"], check=True,
        capture_output=True, text=True).stdout)
    shards = {t["fqn"]: t["shards"] for t in manifest["tensors"]}
    assert len(shards["t.e"]) == 1 and len(shards["t.d"]) == 2, shards


def test_every_way_in_loaded_on_three_ranks_then_two(saved):
    # Checkpointer and dcp.load, each of what Checkpointer, dcp.save,
    # async_save and the import wrote (from 2-D and 3-D meshes); then the 3
    # ranks save step 107 from what they loaded of 7, and a 1x2 mesh loads
    # it: 4 ranks (2x2) -> 3 (1-D) -> 2 (1x2), each load resharding the last.
    ranks(saved, "mesh3", 3, "load:1", "dcp_load:1", "load:5", "dcp_load:5", "load:7",
          "load:11", "load:12:112", "dcp_load:12:112", "load:13", "load:14", "load:30:3",
          "dcp_load:30:3", "stage_load:40", "load:50", "dcp_load:51", "resave:7")
    ranks(saved, "mesh1x2", 2, "load:107:7", "dcp_load:50", "load:51", "dcp_latest:107:7")
