"""One rank of a multi-process test: save or load its shards of a job.

    python rank_worker.py save|load SOCKET JOB RANK WORLD

Global tensors are known to every rank (built from arange), so each rank
checks what it loaded against its own slice of them, byte for byte.
"""
import sys

import torch

import ckpt

ROWS, COLS = 37, 11


def global_tensors():
    w = torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) * 0.5
    flat = torch.arange(1000, dtype=torch.int64) * 3 - 7
    emb = torch.arange(ROWS * 4, dtype=torch.float32).reshape(ROWS, 4).to(torch.bfloat16)
    return w, flat, emb


def full_mask():
    return (torch.arange(ROWS * COLS).reshape(ROWS, COLS) % 3) == 0


def export_state(rank, world):
    """Mixed shardings and dtypes for the export test."""
    w, flat, emb = global_tensors()
    mask = full_mask()
    rb, re = ckpt.split_range(ROWS, rank, world)
    eb, ee = ckpt.split_range(emb.numel(), rank, world)
    cb, ce = ckpt.split_range(COLS, rank, world)
    return {
        "model": {
            "w": ckpt.shard_rows(w[rb:re].clone(), w.shape, rank, world),             # TP rows
            "emb": ckpt.shard_flat(emb.reshape(-1)[eb:ee].clone(), emb.shape, eb),    # FSDP flat
            "mask": ckpt.shard_columns(mask[:, cb:ce].clone(), mask.shape, rank, world),
            "ids": flat.clone(),                                                      # replicated
            "scale": torch.tensor(0.125),                                             # 0-d
            "empty": torch.zeros(0, 3),                                               # zero-size
        },
        "optim": {"step": torch.tensor(3)},
    }


def main():
    mode, socket, job, rank, world = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    w, flat, emb = global_tensors()
    with ckpt.Checkpointer(job, rank=rank, world_size=world, socket_path=socket) as cp:
        if mode == "save_tpdp":
            # World of 4: rows split over 2 tensor-parallel ranks, the two
            # halves replicated over 2 data-parallel groups.
            tp, tp_world = rank % 2, 2
            rb, re = ckpt.split_range(ROWS, tp, tp_world)
            cp.save(30, {"w": ckpt.shard_rows(w[rb:re].clone(), w.shape, tp, tp_world),
                         "emb": emb.clone()}).wait_persisted()
        elif mode in ("load_columns", "load_flat"):
            if mode == "load_columns":
                cb, ce = ckpt.split_range(COLS, rank, world)
                state = {"w": ckpt.shard_columns(torch.zeros(ROWS, ce - cb), w.shape, rank, world)}
                want = w[:, cb:ce]
            else:
                fb, fe = ckpt.split_range(w.numel(), rank, world)
                state = {"w": ckpt.shard_flat(torch.zeros(fe - fb), w.shape, fb)}
                want = w.reshape(-1)[fb:fe]
            state["emb"] = torch.zeros_like(emb)
            cp.load(30, state)
            if not (torch.equal(state["w"].tensor, want) and torch.equal(state["emb"], emb)):
                print(f"rank {rank}: {mode} differs", file=sys.stderr)
                return 1
        elif mode == "load_imported":
            # The export test's tensors, imported back, resharded: rows, a
            # flat range, whole.
            mask = full_mask()
            rb, re = ckpt.split_range(ROWS, rank, world)
            eb, ee = ckpt.split_range(emb.numel(), rank, world)
            state = {"model": {
                "w": ckpt.shard_rows(torch.zeros(re - rb, COLS), w.shape, rank, world),
                "emb": ckpt.shard_flat(torch.zeros(ee - eb, dtype=torch.bfloat16), emb.shape, eb),
                "mask": torch.zeros_like(mask),
                "ids": torch.zeros_like(flat),
                "scale": torch.tensor(0.0),
            }}
            cp.load(1, state)
            got = state["model"]
            ok = (torch.equal(got["w"].tensor, w[rb:re]) and
                  torch.equal(got["emb"].tensor, emb.reshape(-1)[eb:ee]) and
                  torch.equal(got["mask"], mask) and
                  torch.equal(got["ids"], flat) and torch.equal(got["scale"], torch.tensor(0.125)))
            if not ok:
                print(f"rank {rank}: imported tensors differ", file=sys.stderr)
                return 1
        elif mode == "save_export":
            cp.save(20, export_state(rank, world)).wait_persisted()
        elif mode == "save":
            # Rows of w, a flat range of flat (FSDP style), emb replicated.
            rb, re = ckpt.split_range(ROWS, rank, world)
            fb, fe = ckpt.split_range(flat.numel(), rank, world)
            state = {
                "w": ckpt.shard_rows(w[rb:re].clone(), w.shape, rank, world),
                "flat": ckpt.shard_flat(flat[fb:fe].clone(), flat.shape, fb),
                "emb": emb.clone(),
                "rank_info": {"rank": rank},
            }
            cp.save(10, state).wait_persisted()
        else:
            # Columns of w, rows of flat reshaped as a box, emb as a flat range.
            cb, ce = ckpt.split_range(COLS, rank, world)
            fb, fe = ckpt.split_range(flat.numel(), world - 1 - rank, world)
            eb, ee = ckpt.split_range(emb.numel(), rank, world)
            state = {
                "w": ckpt.shard_columns(torch.zeros(ROWS, ce - cb), w.shape, rank, world),
                "flat": ckpt.shard_box(torch.zeros(fe - fb, dtype=torch.int64), flat.shape, [fb]),
                "emb": ckpt.shard_flat(torch.zeros(ee - eb, dtype=torch.bfloat16), emb.shape, eb),
            }
            step = cp.load("latest", state)
            checks = {
                "w": (state["w"].tensor, w[:, cb:ce]),
                "flat": (state["flat"].tensor, flat[fb:fe]),
                "emb": (state["emb"].tensor, emb.reshape(-1)[eb:ee]),
            }
            for name, (got, want) in checks.items():
                if got.contiguous().view(torch.uint8).tolist() != want.contiguous().view(torch.uint8).tolist():
                    print(f"rank {rank}: {name} differs", file=sys.stderr)
                    return 1
            if step != 10:
                print(f"rank {rank}: loaded step {step}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
