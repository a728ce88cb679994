"""A tiny decoder-only transformer and its data, for the FSDP2 / TP tests.

Everything is a function of the seed and the step: the initial weights
(built whole on every rank before any sharding) and each step's global
batch, which each data-parallel rank slices. So any world size trains on
the same tokens, and two runs with one world size are bit-identical.
"""
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HEADS, HIDDEN, LAYERS, SEQ = 32, 16, 2, 32, 2, 8
GLOBAL_BATCH = 12  # divides among 1, 2, 3 and 4 data-parallel ranks


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        # Heads from the local width: tensor parallelism gives each rank
        # HEADS / tp of them.
        q, k, v = (w(x).view(b, t, -1, DIM // HEADS).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN)
        self.w2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM)
        self.attn = Attention()
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def build_model(seed: int) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM()


def batch(seed: int, step: int, dp_rank: int, dp_world: int) -> torch.Tensor:
    """This data-parallel rank's rows of step's global batch (tokens)."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    tokens = torch.randint(VOCAB, (GLOBAL_BATCH, SEQ + 1), generator=g)
    rows = GLOBAL_BATCH // dp_world
    return tokens[dp_rank * rows:(dp_rank + 1) * rows]


def loss_of(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
