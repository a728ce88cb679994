"""The chunk codecs on real training state: a small transformer language
model trained with AdamW on a learnable synthetic task for some steps, its
state written at two consecutive steps as safetensors (what mixed-precision
training keeps per parameter: the bf16 weight, the fp32 master weight and
Adam's two moments), then measured by `ckpt-bench --codecs --codec-files`:
grouped-zstd and zstd ratios per dtype and the delta ratios between the two
steps.

    PYTHONPATH=build/agent/python python3 agent/examples/codec_ratios.py \
        --bench build/tools/bench/ckpt-bench --steps 200 [--dim 256 --layers 4]
"""
import argparse
import os
import subprocess
import tempfile

import torch
from safetensors.torch import save_file


class LM(torch.nn.Module):
    def __init__(self, vocab, dim, layers, seq):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.position = torch.nn.Parameter(torch.randn(seq, dim) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(dim, 4, dim_feedforward=4 * dim, dropout=0.0,
                                                 batch_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(dim, vocab)
        self.register_buffer("causal", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, tokens):
        n = tokens.shape[1]
        return self.head(self.blocks(self.embed(tokens) + self.position[:n],
                                     mask=self.causal[:n, :n]))


def batch(step, vocab, seq, size):
    """A learnable task: each sequence counts up from a random start, mod
    vocab, so the model has something to fit and its weights move as
    training moves them."""
    g = torch.Generator().manual_seed(step)
    start = torch.randint(0, vocab, (size, 1), generator=g)
    return (start + torch.arange(seq + 1)) % vocab


def state_of(model, opt):
    """Per parameter: bf16 weight, fp32 master, Adam's exp_avg and exp_avg_sq."""
    out = {}
    for name, p in model.named_parameters():
        out[f"bf16.{name}"] = p.detach().to(torch.bfloat16).contiguous()
        out[f"master.{name}"] = p.detach().float().contiguous()
        st = opt.state.get(p, {})
        if "exp_avg" in st:
            out[f"adam_m.{name}"] = st["exp_avg"].float().contiguous()
            out[f"adam_v.{name}"] = st["exp_avg_sq"].float().contiguous()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", required=True, help="path of ckpt-bench")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dir", default=None, help="where to write the two steps (default: a temp dir)")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = LM(args.vocab, args.dim, args.layers, args.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tempfile.TemporaryDirectory(prefix="codec-ratios-") as tmp:
        out_dir = args.dir or tmp
        paths = []
        for step in range(args.steps + 1):
            tokens = batch(step, args.vocab, args.seq, args.batch)
            loss = torch.nn.functional.cross_entropy(
                model(tokens[:, :-1]).reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step >= args.steps - 1:
                path = os.path.join(out_dir, f"step-{step}.safetensors")
                save_file(state_of(model, opt), path)
                paths.append(path)
        print(f"codec_ratios: {args.steps} steps, loss {loss.item():.3f}, "
              f"{sum(p.numel() for p in model.parameters())} parameters", flush=True)
        subprocess.run([args.bench, "--codecs", "--json", "--codec-files", *paths], check=True)


if __name__ == "__main__":
    main()
