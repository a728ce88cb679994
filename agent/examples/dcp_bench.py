"""torch.distributed.checkpoint with DCP's own FileSystemWriter/Reader and
with ckpt's plugin: the same state, the same disk, one run.

    PYTHONPATH=build/agent/python .venv/bin/python agent/examples/dcp_bench.py \
        [--gib 1] [--dir /var/tmp] [--ckptd build/daemon/ckptd] [--json]

Starts its own ckptd (storage and DCP's files both under --dir) and two
worlds of gloo processes on this host. Two ranks hold the state as DTensors
sharded over them and time, one after the other:
  fs_save_s / ckpt_save_s            dcp.save until it returns (durable: both
                                     fsync before returning)
  fs_async_stall_s / ckpt_...        dcp.async_save until it returns: the
                                     trainer may change its tensors then
  fs_async_total_s / ckpt_...        ... until its future completes (durable)
                                     (the second of two async saves through
                                     one writer; *_first: the first)
Then one rank loads the state resharded to its world size, from a cold page
cache where this process may drop it (root):
  fs_load_s / ckpt_load_s            dcp.load until it returns
Like ckptd.service, the run sets shared memory's huge pages to "advise"
where it finds "never" (as root; restored after): the pool's direct I/O
needs them to go fast. Each figure is the slowest rank's. The ratios ckpt/fs follow, with the goals
(stall <= 0.5, total <= 1.0, load <= 1.0), and the disk's own limit: fio
(io_uring, O_DIRECT, 4 MiB blocks, queue depth 16; the best of one file and
of four at once) writing and reading as many bytes in the same directory,
as fio_write_s / fio_read_s. Both loads must give the
saved bytes exactly, or the run fails.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SAVE_WORLD, LOAD_WORLD = 2, 1
TENSOR_ROWS, TENSOR_COLS = 4096, 4096  # 64 MiB of float32 each


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="the state's size")
    parser.add_argument("--dir", default="/var/tmp", help="the disk both write to")
    parser.add_argument("--ckptd", default=os.environ.get(
        "CKPTD", os.path.join(HERE, "../../build/daemon/ckptd")))
    parser.add_argument("--json", action="store_true", help="one JSON line, nothing else")
    parser.add_argument("--role", choices=["save", "load"], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        return rank_main(args)
    tensors = max(1, round(args.gib * (1 << 30) / (TENSOR_ROWS * TENSOR_COLS * 4)))
    state_bytes = tensors * TENSOR_ROWS * TENSOR_COLS * 4
    work = tempfile.mkdtemp(prefix="dcp-bench-", dir=args.dir)
    daemon = None
    shmem_was = _advise_shmem_huge_pages()
    try:
        socket = os.path.join(work, "ckptd.sock")
        # The pool holds a whole snapshot (and room for the next): staging
        # never waits for the disk.
        pool = (2 * state_bytes + (512 << 20)) // 4096 * 4096
        daemon = subprocess.Popen(
            [args.ckptd, f"--storage_root={work}/ckpt", f"--socket_path={socket}",
             f"--pool_bytes={pool}"], stderr=subprocess.PIPE, text=True)
        for line in daemon.stderr:
            if "ckptd: serving" in line:
                break
        else:
            raise SystemExit(f"dcp_bench: ckptd exited with {daemon.wait()} before serving")
        figures = {"state_bytes": state_bytes, "save_ranks": SAVE_WORLD,
                   "load_ranks": LOAD_WORLD, "shmem_huge_pages": _shmem_huge_pages() not in (None, "never")}
        for role, world in (("save", SAVE_WORLD), ("load", LOAD_WORLD)):
            run_world(role, world, work, socket, tensors)
            with open(os.path.join(work, f"{role}.json")) as f:
                figures.update(json.load(f))
        figures.update(fio_floor(work, state_bytes))
        for what in ("async_stall", "async_total", "save", "load"):
            figures[f"ckpt_over_fs_{what}"] = round(
                figures[f"ckpt_{what}_s"] / figures[f"fs_{what}_s"], 3)
        if "fio_write_s" in figures:
            figures["ckpt_async_total_over_fio_write"] = round(
                figures["ckpt_async_total_s"] / figures["fio_write_s"], 3)
            figures["ckpt_load_over_fio_read"] = round(
                figures["ckpt_load_s"] / figures["fio_read_s"], 3)
        figures["goals"] = {"ckpt_over_fs_async_stall": 0.5, "ckpt_over_fs_async_total": 1.0,
                            "ckpt_over_fs_load": 1.0}
        if args.json:
            print(json.dumps(figures))
        else:
            for k, v in figures.items():
                print(f"{k:28} {v}")
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
        shutil.rmtree(work, ignore_errors=True)
        if shmem_was is not None:
            _write(_SHMEM, shmem_was)
    return 0


_SHMEM = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"


def _shmem_huge_pages():
    """The kernel's huge-page setting for shared memory (None: unknown)."""
    try:
        with open(_SHMEM) as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return None


def _advise_shmem_huge_pages():
    """Sets shared memory's huge pages to "advise" where they are "never",
    as ckptd.service does (the pool's direct I/O goes in 4 MiB requests
    from huge pages, 1 MiB from small ones); what to restore after, or None."""
    if _shmem_huge_pages() != "never" or not _write(_SHMEM, "advise"):
        return None
    return "never"


def _write(path, text) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


def fio_floor(work, nbytes):
    """Seconds fio takes to write, then read, nbytes in work: the best of one
    file and of four at once (ckptd streams several); none without fio."""
    if shutil.which("fio") is None:
        return {}
    out = {}
    for rw, field in (("write", 47), ("read", 6)):  # terse v3: bandwidth in KiB/s
        best = 0.0
        for jobs in (1, 4):
            terse = subprocess.run(
                ["fio", "--name=floor", f"--directory={work}", "--ioengine=io_uring",
                 "--direct=1", "--bs=4m", "--iodepth=16", f"--rw={rw}", f"--numjobs={jobs}",
                 f"--size={nbytes // jobs}", "--end_fsync=1", "--group_reporting",
                 "--output-format=terse"], check=True, capture_output=True, text=True).stdout
            best = max(best, float(terse.strip().splitlines()[-1].split(";")[field]))
        out[f"fio_{rw}_s"] = round(nbytes / (best * 1024), 4)
    for name in os.listdir(work):
        if name.startswith("floor."):
            os.remove(os.path.join(work, name))
    return out


def run_world(role, world, work, socket, tensors):
    port = _free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   CKPTD_SOCKET=socket, DCP_BENCH_TENSORS=str(tensors))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                       f"--role={role}", f"--work={work}"], env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"dcp_bench: the {role} ranks exited with {codes}")


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- in each rank ---

def rank_main(args):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from ckpt.dcp import StorageReader, StorageWriter

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    placement = [Shard(0)] if args.role == "save" else [Replicate()]
    tensors = int(os.environ["DCP_BENCH_TENSORS"])

    def state(fill):
        out = {}
        for i in range(tensors):
            g = fill(i)
            out[f"layers.{i}.weight"] = distribute_tensor(g, mesh, placement, src_data_rank=None)
        return {"model": out, "step": 100}

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return round(float(t), 4)

    def timed(fn):
        os.sync()  # earlier phases' dirty pages are not this one's to write
        dist.barrier()
        start = time.perf_counter()
        result = fn()
        return slowest(time.perf_counter() - start), result

    figures = {}
    fs_dir = os.path.join(args.work, "fs")
    if args.role == "save":
        sd = state(expected)
        figures["fs_save_s"], _ = timed(
            lambda: dcp.save(sd, storage_writer=dcp.FileSystemWriter(fs_dir)))
        figures["ckpt_save_s"], _ = timed(
            lambda: dcp.save(sd, storage_writer=StorageWriter("ckpt://bench/1")))
        # Two async saves each: the second is a trainer's steady state (ckpt's
        # pool is mapped); both rounds are reported. DCP's
        # cache_staged_state_dict=True would keep its staged copy, but it
        # pins that memory, which needs a GPU.
        writers = {"fs": lambda r: dcp.FileSystemWriter(f"{fs_dir}-async-{r}"),
                   "ckpt": lambda r: StorageWriter(f"ckpt://bench/{1 + r}")}
        for name, writer in writers.items():
            for round_ in (1, 2):
                w = writer(round_)
                os.sync()
                dist.barrier()
                start = time.perf_counter()
                future = dcp.async_save(sd, storage_writer=w)
                stall = time.perf_counter() - start
                future.result()
                total = time.perf_counter() - start
                suffix = "" if round_ == 2 else "_first"
                figures[f"{name}_async_stall_s{suffix}"] = slowest(stall)
                figures[f"{name}_async_total_s{suffix}"] = slowest(total)
    else:
        for name, reader in (("fs", lambda: dcp.FileSystemReader(fs_dir)),
                             ("ckpt", lambda: StorageReader("ckpt://bench/1"))):
            sd = state(lambda i: torch.zeros(TENSOR_ROWS, TENSOR_COLS))
            sd["step"] = -1
            figures["cold_page_cache"] = _drop_page_cache()
            figures[f"{name}_load_s"], _ = timed(lambda: dcp.load(sd, storage_reader=reader()))
            for i, t in enumerate(sd["model"].values()):
                if not torch.equal(t._local_tensor, expected(i)):
                    raise SystemExit(f"dcp_bench: {name} load: layers.{i}.weight differs")
            if sd["step"] != 100:
                raise SystemExit(f"dcp_bench: {name} load: step is {sd['step']}")
    if rank == 0:
        with open(os.path.join(args.work, f"{args.role}.json"), "w") as f:
            json.dump(figures, f)
    dist.barrier()
    dist.destroy_process_group()
    # gloo's threads can abort the interpreter's teardown; all is written.
    sys.stdout.flush()
    os._exit(0)


def expected(i):
    import torch
    g = torch.Generator().manual_seed(i)
    return torch.randn(TENSOR_ROWS, TENSOR_COLS, generator=g)


def _drop_page_cache() -> bool:
    """Written files leave the page cache (root only); False where not."""
    os.sync()
    return _write("/proc/sys/vm/drop_caches", "3\n")


if __name__ == "__main__":
    sys.exit(main())
