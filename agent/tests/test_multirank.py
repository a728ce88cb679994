"""Several rank processes: saved in one sharding, loaded into another."""
import os
import subprocess
import sys

WORKER = os.path.join(os.path.dirname(__file__), "rank_worker.py")


def run_ranks(mode, socket, job, world):
    procs = [subprocess.Popen([sys.executable, WORKER, mode, socket, job, str(r), str(world)],
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for rank, (code, err) in enumerate(results):
        assert code == 0, f"{mode} rank {rank} of {world}: exit {code}\n{err}"


def test_two_ranks_save_three_ranks_load_resharded(daemon):
    run_ranks("save", daemon.socket, "reshard", 2)
    run_ranks("load", daemon.socket, "reshard", 3)


def test_tp_and_dp_saved_then_loaded_by_columns_and_fsdp_flat(daemon):
    run_ranks("save_tpdp", daemon.socket, "tpdp", 4)
    run_ranks("load_columns", daemon.socket, "tpdp", 3)
    run_ranks("load_flat", daemon.socket, "tpdp", 2)


def test_a_rank_that_never_arrives_fails_the_others_not_hangs(daemon):
    # World of 2, only rank 0 runs: its save fails once the daemon's plan
    # time limit passes (5 s here), with an error naming the missing rank;
    # then the daemon still serves.
    proc = subprocess.run([sys.executable, WORKER, "save", daemon.socket, "lonely", "0", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "DEADLINE_EXCEEDED" in proc.stderr and "ranks [1]" in proc.stderr, proc.stderr
    run_ranks("save", daemon.socket, "after", 1)
