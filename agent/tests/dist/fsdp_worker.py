"""One rank of a FSDP2 (or TP x FSDP2) training run, under torchrun (gloo, CPU).

    torchrun --nproc-per-node W fsdp_worker.py --out DIR --steps N [--tp T]
        [--options sharded|full|full_offload] [--socket S --job J]
        [--resume ckpt|FULL.pt] [--halt-at K] [--full-at K FULL.pt]

Trains fsdp_model.TinyLM with AdamW and a LinearLR schedule. With --socket,
every step's state goes through get_state_dict(options) to ckpt's
Checkpointer.save; --resume ckpt loads "latest" back through
Checkpointer.load_state and set_model_state_dict / set_optimizer_state_dict. --resume FULL.pt is the
reference path: PyTorch's own tools only (a full state dict that --full-at
wrote with torch.save, loaded with broadcast_from_rank0).

Rank 0 writes into DIR: losses.txt (a line per step: the step and every
rank's loss as float.hex), resumed_from (the step a resume loaded) and, at
the end, final.pt (the full model and optimizer state, gathered). With
--halt-at K, each rank writes committed.RANK (its pid) once step K is
persisted, prints "committed rank RANK", then waits to be killed.
"""
import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict,
                                                     set_model_state_dict,
                                                     set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsdp_model  # noqa: E402

import ckpt  # noqa: E402

# What each --options value passes to get_state_dict (save) and to
# set_model_state_dict / set_optimizer_state_dict (load). With cpu_offload only rank 0 holds the full
# tensors, so on load rank 0 broadcasts them.
SAVE_OPTIONS = {
    "sharded": StateDictOptions(),
    "full": StateDictOptions(full_state_dict=True),
    "full_offload": StateDictOptions(full_state_dict=True, cpu_offload=True),
}
LOAD_OPTIONS = {
    "sharded": StateDictOptions(),
    "full": StateDictOptions(full_state_dict=True),
    "full_offload": StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
}
GATHERED = StateDictOptions(full_state_dict=True, cpu_offload=True)
BROADCAST = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)

TP_PLAN = {
    "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
    "attn.wo": RowwiseParallel(), "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel(),
}


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tp", type=int, default=0, help="0: FSDP2 alone; T: a (dp, tp) mesh")
    p.add_argument("--options", choices=sorted(SAVE_OPTIONS), default="sharded")
    p.add_argument("--socket")
    p.add_argument("--job")
    p.add_argument("--resume", help="'ckpt' (latest) or a full state file")
    p.add_argument("--halt-at", type=int, default=0)
    p.add_argument("--full-at", nargs=2, metavar=("STEP", "FILE"))
    return p.parse_args()


def parallelize(model, tp: int, world: int):
    """Shards the model in place; returns its data-parallel mesh."""
    if tp:
        mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
        for block in model.layers:
            parallelize_module(block, mesh["tp"], TP_PLAN)
        dp_mesh = mesh["dp"]
    else:
        dp_mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    for block in model.layers:
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    return dp_mesh


class Run:
    def __init__(self, args):
        self.args = args
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.model = fsdp_model.build_model(args.seed)
        self.dp_mesh = parallelize(self.model, args.tp, self.world)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=1e-2, weight_decay=0.1)
        self.sched = torch.optim.lr_scheduler.LinearLR(self.optim, start_factor=0.25,
                                                       total_iters=args.steps)

    def state(self, options):
        model, optim = get_state_dict(self.model, self.optim, options=options)
        return {"model": model, "optim": optim, "sched": self.sched.state_dict()}

    def set_state(self, model, optim, options):
        # Not set_state_dict(): given an empty model state (a rank other
        # than 0 under broadcast_from_rank0) it skips the model, while rank
        # 0 broadcasts it (torch 2.13): a hang.
        set_model_state_dict(self.model, model, options=options)
        set_optimizer_state_dict(self.model, self.optim, optim, options=options)

    def write(self, name, data, mode="w"):
        if self.rank == 0:
            with open(os.path.join(self.args.out, name), mode) as f:
                f.write(data)

    def resume_from_ckpt(self, cp) -> int:
        # The template: this rank's tensors in the current sharding (a fresh
        # optimizer's state is created by get_state_dict), filled in place.
        step, state = cp.load_state("latest", self.state(SAVE_OPTIONS[self.args.options]))
        self.set_state(state["model"], state["optim"], LOAD_OPTIONS[self.args.options])
        self.sched.load_state_dict(state["sched"])
        return step

    def resume_from_full(self, path) -> int:
        full = torch.load(path, weights_only=True) if self.rank == 0 else None
        box = [{"step": full["step"], "sched": full["sched"]} if full else None]
        dist.broadcast_object_list(box, src=0)
        self.set_state(full["model"] if full else {}, full["optim"] if full else {}, BROADCAST)
        self.sched.load_state_dict(box[0]["sched"])
        return box[0]["step"]

    def save_full(self, step, path):
        state = self.state(GATHERED)
        if self.rank == 0:
            torch.save({"step": step, **state}, path)

    def train(self, cp, start: int):
        args = self.args
        dp_rank, dp_world = self.dp_mesh.get_local_rank(), self.dp_mesh.size()
        for step in range(start + 1, args.steps + 1):
            loss = fsdp_model.loss_of(self.model, fsdp_model.batch(args.seed, step, dp_rank,
                                                                   dp_world))
            loss.backward()
            self.optim.step()  # wrapped: first waits for the last save's snapshot
            self.optim.zero_grad()
            self.sched.step()
            losses = [torch.zeros(1) for _ in range(self.world)]
            dist.all_gather(losses, loss.detach().reshape(1))
            self.write("losses.txt", f"{step} " + " ".join(
                float(x).hex() for x in losses) + "\n", "a")
            if cp is not None:
                handle = cp.save(step, self.state(SAVE_OPTIONS[args.options]))
            if args.full_at and step == int(args.full_at[0]):
                self.save_full(step, args.full_at[1])
            if step == args.halt_at:
                handle.wait_persisted()
                marker = os.path.join(args.out, f"committed.{self.rank}")
                with open(marker + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename(marker + ".tmp", marker)
                # One write (atomic on a pipe): the test reads the ranks'
                # lines from torchrun's stdout, which they share.
                os.write(1, f"committed rank {self.rank}\n".encode())
                while True:
                    signal.pause()  # until the test's SIGKILL

    def finish(self):
        state = self.state(GATHERED)
        if self.rank == 0:
            torch.save({"model": state["model"], "optim": state["optim"]},
                       os.path.join(self.args.out, "final.pt"))


def main():
    args = parse()
    dist.init_process_group("gloo")
    run = Run(args)
    cp = None
    if args.socket:
        cp = ckpt.Checkpointer(args.job, rank=run.rank, world_size=run.world,
                               socket_path=args.socket)
    start = 0
    if args.resume == "ckpt":
        start = run.resume_from_ckpt(cp)
    elif args.resume:
        start = run.resume_from_full(args.resume)
    if args.resume:
        run.write("resumed_from", str(start))
    if cp is not None:
        cp.wrap_optimizer(run.optim)
    run.train(cp, start)
    if cp is not None:
        cp.close()
    run.finish()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Not a normal exit: now and then (1 run in 7 here, without ckpt as
    # well) a gloo worker thread of torch 2.13 frees a finished all-gather
    # while the interpreter finalizes, its decref of a tensor cannot take
    # the GIL, and the process aborts ("terminate called without an active
    # exception", ProcessGroupGloo::runLoop -> ~AsyncAllgatherCoalescedWork).
    # Everything is written and closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
