"""What a checkpoint of the example trainer's state costs the trainer: ckpt's
save + wait_snapshot against torch.save of the same state to the same disk
(write + fsync), measured in one run, median of --repeats.

    PYTHONPATH=build/agent/python python3 agent/examples/save_cost.py \
        --socket /run/ckptd/ckptd.sock --dir /var/lib/ckpt-scratch [--width 4]

--width multiplies the model's width (4: about 4x the parameters) so the
state can be made large enough for the disk to matter.
"""
import argparse
import os
import statistics
import time

import torch

import ckpt
import train_lm


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", default=os.environ.get("CKPTD_SOCKET", "/run/ckptd/ckptd.sock"))
    parser.add_argument("--dir", required=True, help="where torch.save writes (ckptd's disk)")
    parser.add_argument("--width", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    train_lm.DIM *= args.width
    torch.manual_seed(0)
    model = train_lm.TinyLM()
    opt = torch.optim.Adam(model.parameters())
    ckpt.init_optimizer_state(opt)
    state = train_lm.training_state(model, opt, 0, 0)
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values()) * 3
    cp = ckpt.Checkpointer(f"save-cost-{os.getpid()}", socket_path=args.socket)
    stalls, plain = [], []
    path = os.path.join(args.dir, f"save-cost-{os.getpid()}.pt")
    for i in range(args.repeats):
        start = time.perf_counter()
        handle = cp.save(i + 1, state)
        handle.wait_snapshot()
        stalls.append(time.perf_counter() - start)
        handle.wait_persisted()
        start = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        plain.append(time.perf_counter() - start)
    os.unlink(path)
    cp.close()
    s, p = statistics.median(stalls), statistics.median(plain)
    print(f"state {nbytes / 1e6:.1f} MB: ckpt save + wait_snapshot {s * 1e3:.2f} ms, "
          f"torch.save + fsync {p * 1e3:.2f} ms ({p / s:.1f}x)")


if __name__ == "__main__":
    main()
