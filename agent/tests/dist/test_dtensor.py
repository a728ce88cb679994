"""DTensors saved from one mesh and placements, loaded into others, through
Checkpointer and through torch.distributed.checkpoint with ckpt's plugin:
every local shard byte for byte what torch's own distribute_tensor makes."""
import json
import os
import subprocess
import sys

from world import run_world

WORKER = os.path.join(os.path.dirname(__file__), "dtensor_worker.py")
CKPTCTL = os.environ.get(
    "CKPTCTL", os.path.join(os.path.dirname(__file__), "../../../build/tools/ckptctl/ckptctl"))


def ranks(daemon, job, layout, world, *actions):
    run_world(WORKER, world, [daemon.socket, job, layout, *actions])


def test_four_ranks_then_three_then_two(daemon):
    # 2x2 mesh (uneven, empty and strided shards) -> 1-D mesh of 3, which
    # saves what it loaded -> a 1x2 mesh: each step reshards the last. A
    # Partial placement is refused on the way.
    ranks(daemon, "chain", "mesh2x2", 4, "save:1", "partial:9")
    ranks(daemon, "chain", "mesh3", 3, "resave:1")
    ranks(daemon, "chain", "mesh1x2", 2, "load:2:1")


def test_dcp_save_and_load_through_ckpt_both_ways(daemon):
    # dcp.save -> dcp.load and Checkpointer.load; Checkpointer.save ->
    # dcp.load; a 1-D mesh of 4 -> a single rank.
    ranks(daemon, "dcp", "mesh4", 4, "dcp_save:5", "save:7")
    # On the mesh of 4, "e" is Replicate() on every rank and "d" Shard(1):
    # the MANIFEST holds one stored copy of e, four shards of d.
    manifest = json.loads(subprocess.run(
        [CKPTCTL, f"--socket={daemon.socket}", "inspect", "dcp", "7"], check=True,
        capture_output=True, text=True).stdout)
    shards = {t["fqn"]: t["shards"] for t in manifest["tensors"]}
    assert len(shards["t.e"]) == 1 and len(shards["t.d"]) == 4, shards
    ranks(daemon, "dcp", "mesh3", 3, "dcp_load:7", "load:5", "save:8")
    ranks(daemon, "dcp", "mesh1", 1, "dcp_load:8", "load:5")



def test_dcp_async_save_in_threads_and_in_a_process(daemon):
    # Each trainer overwrites its tensors the moment async_save returns; the
    # loads see the values from before.
    ranks(daemon, "async", "mesh2x2", 4, "dcp_async:1", "dcp_async_process:2:12",
          "dcp_async_reuse:3")
    ranks(daemon, "async", "mesh3", 3, "load:1", "load:2:12", "load:3", "dcp_load:4")


def test_a_checkpoint_of_dcps_own_writer_is_imported(daemon):
    ranks(daemon, "fs", "mesh2x2", 4, "fs_save:3")
    fs_dir = os.path.join(os.path.dirname(daemon.socket), "fs-fs-3")
    refused = subprocess.run(
        [sys.executable, "-m", "ckpt.import_dcp", fs_dir, "imported", "3",
         f"--socket={daemon.socket}"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--allow-pickle" in refused.stderr, refused.stderr
    subprocess.run([sys.executable, "-m", "ckpt.import_dcp", fs_dir, "imported", "3",
                    f"--socket={daemon.socket}", "--allow-pickle"], check=True)
    ranks(daemon, "imported", "mesh3", 3, "load:3", "dcp_load:3")
