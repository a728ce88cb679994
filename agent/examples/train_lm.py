"""A small transformer language model on synthetic data, trained by several
CPU processes (gloo all-reduce), checkpointing every k steps through ckpt,
resumable from the latest checkpoint.

    PYTHONPATH=build/agent/python python3 agent/examples/train_lm.py \
        --socket /run/ckptd/ckptd.sock --job tiny-lm --world 2 --steps 40 --every 10
    # kill it at any moment, then add --resume: it goes on from the latest
    # checkpoint and ends with the same weights and loss as a run never killed.
"""
import argparse
import hashlib
import json
import os
import tempfile
import threading

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import ckpt

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 64, 32, 2, 2, 16, 8


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.position = torch.nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(DIM, HEADS, dim_feedforward=4 * DIM, dropout=0.1,
                                                 batch_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, LAYERS)
        self.head = torch.nn.Linear(DIM, VOCAB)
        self.register_buffer("causal", torch.triu(torch.full((SEQ, SEQ), float("-inf")), 1))

    def forward(self, tokens):
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.head(self.blocks(x, mask=self.causal[: tokens.shape[1], : tokens.shape[1]]))


def batch(step, rank):
    """The data of a step: a function of (step, rank), so resuming at step s
    sees exactly what an uninterrupted run saw."""
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    return torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)


def training_state(model, opt, rank, step):
    """What a checkpoint holds: weights, the optimizer (Adam's moments and
    settings), this rank's RNG and where the data is. The model is
    replicated, so its tensors are saved once; the RNG differs per rank, so
    it is named per rank."""
    return {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "rng": {f"rank{rank}": torch.get_rng_state()},
        "data": {"step": step},
    }


def fingerprint(model):
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def run(rank, args, init_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=args.world)
    torch.manual_seed(args.seed)  # same initial weights on every rank
    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    torch.manual_seed(args.seed + 1 + rank)  # each rank its own dropout
    cp = ckpt.Checkpointer(args.job, rank=rank, world_size=args.world, socket_path=args.socket,
                           codec=args.codec, delta_every=args.delta_every)
    cp.wrap_optimizer(opt)
    start = 0
    if args.resume:
        # Adam makes its state on its first step; the load needs it now.
        ckpt.init_optimizer_state(opt)
        state = training_state(model, opt, rank, 0)
        step = cp.load("latest", state)
        opt.load_state_dict(state["optim"])  # the settings; the moments are in place already
        torch.set_rng_state(state["rng"][f"rank{rank}"])
        start = state["data"]["step"]
        print(f"rank {rank} resumed from step {step}", flush=True)
    loss = torch.tensor(0.0)
    for step in range(start, args.steps):
        tokens = batch(step, rank)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= args.world
        opt.step()  # waits for the last checkpoint's snapshot first
        print(f"rank {rank} step {step + 1} loss {loss.item():.6f}", flush=True)
        if (step + 1) % args.every == 0:
            saved = cp.save(step + 1, training_state(model, opt, rank, step + 1))  # lazy
            if args.wait_persisted:
                saved.wait_persisted()
        if args.halt_after == step + 1:
            # For crash tests: stop here, mid-run, until killed, so the kill
            # cannot come after the run already ended.
            threading.Event().wait()
    cp.close()
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump({"loss": loss.item(), "weights": fingerprint(model)}, f)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", default=os.environ.get("CKPTD_SOCKET", "/run/ckptd/ckptd.sock"))
    parser.add_argument("--job", default="tiny-lm")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--out", help="write the final loss and a hash of the weights here")
    parser.add_argument("--codec", choices=["none", "zstd", "grouped-zstd"],
                        help="how ckptd stores the chunks (default: the daemon's --codec)")
    parser.add_argument("--delta-every", type=int,
                        help="a full step every K saves, deltas against it between "
                             "(default: the daemon's --delta_every)")
    parser.add_argument("--wait-persisted", action="store_true",
                        help="wait for each checkpoint to be committed before the next step")
    parser.add_argument("--halt-after", type=int, default=0,
                        help="tests: after this step, wait to be killed instead of going on")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run, args=(args, os.path.join(tmp, "init")), nprocs=args.world)


if __name__ == "__main__":
    main()
