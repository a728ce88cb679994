"""A torch.distributed world of real processes (gloo, CPU), as torchrun
starts one: each rank a process with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set."""
import os
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_world(script, world, args, env=None):
    """The rank processes of script, started; the caller waits for them."""
    port = free_port()
    procs = []
    for rank in range(world):
        rank_env = dict(os.environ, **(env or {}))
        rank_env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                        LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, script, *map(str, args)], env=rank_env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def run_world(script, world, args, env=None, timeout=180):
    """Runs the ranks to the end; their stdouts. Fails with every failed
    rank's stderr."""
    procs = start_world(script, world, args, env)
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failed = [f"rank {r}: exit {p.returncode}\n{err[-4000:]}"
              for r, (p, (_, err)) in enumerate(zip(procs, outs)) if p.returncode != 0]
    assert not failed, f"{os.path.basename(script)} {args} on {world} ranks:\n" + "\n".join(failed)
    return [out for out, _ in outs]
