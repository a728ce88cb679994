"""One rank (of torchrun's) training a tiny Hugging Face Llama under FSDP2 and
saving it through ckpt, for test_hf_fsdp_export.py.

    torchrun --standalone --nproc-per-node 2 hf_fsdp_worker.py SOCKET OUT VARIANT...

Per variant (see VARIANTS) the ranks train a few AdamW steps, save
{"model": sharded model state, "optim": sharded optimizer state} as job
VARIANT (every parameter a DTensor: each rank saves its box), then gather
the full state; rank 0 writes it to OUT/VARIANT.pt with the logits a plain,
non-FSDP model built from it computes on fixed_input(), for the test to
compare the export with.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import ckpt

# name -> (dtype, tie_word_embeddings)
VARIANTS = {"f32-tied": (torch.float32, True), "bf16-untied": (torch.bfloat16, False)}
STEPS = 3
SEQ = 12


def make_config(variant: str) -> LlamaConfig:
    """Odd vocabulary and MLP sizes: FSDP's dim-0 shards of those come out
    uneven (the last rank's box is a row shorter)."""
    dtype, tied = VARIANTS[variant]
    return LlamaConfig(vocab_size=101, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                       tie_word_embeddings=tied, dtype=dtype, bos_token_id=0, eos_token_id=1,
                       pad_token_id=2)


def fixed_input(config: LlamaConfig) -> torch.Tensor:
    return (torch.arange(2 * SEQ).reshape(2, SEQ) * 7 + 3) % config.vocab_size


def batch(config: LlamaConfig, step: int, rank: int) -> torch.Tensor:
    """This rank's tokens for a step: the same on every run."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randint(0, config.vocab_size, (2, SEQ), generator=g)


def build(config: LlamaConfig) -> LlamaForCausalLM:
    """In config.dtype as from_pretrained builds it: parameters in it, the
    rotary inv_freq buffer left in float32 (a model.to(bfloat16) would round
    that too, and its bf16 logits would differ from the loaded model's)."""
    torch.manual_seed(0)  # every rank starts from the same weights
    model = AutoModelForCausalLM.from_config(config)
    assert isinstance(model, LlamaForCausalLM) and model.dtype == config.dtype
    return model


def run(variant: str, socket: str, out: str, rank: int, world: int):
    config = make_config(variant)
    model = build(config)
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(1, STEPS + 1):
        ids = batch(config, step, rank)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()

    state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
    assert all(isinstance(t, torch.distributed.tensor.DTensor) for t in state["model"].values())
    with ckpt.Checkpointer(variant, rank=rank, world_size=world, socket_path=socket) as cp:
        cp.save(STEPS, state, blocking=True).wait_persisted()

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
    if rank == 0:
        plain = build(config).eval()
        plain.load_state_dict(full, strict=True)
        with torch.no_grad():
            logits = plain(input_ids=fixed_input(config)).logits
        torch.save({"state": full, "logits": logits}, os.path.join(out, f"{variant}.pt"))
    dist.barrier()


def main():
    socket, out, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        for variant in variants:
            run(variant, socket, out, dist.get_rank(), dist.get_world_size())
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
