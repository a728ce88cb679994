"""CUDA tensors through the agent and a real ckptd: saved over CUDA IPC (the
daemon pulls from the caching allocator's blocks) or pushed by the rank,
loaded back into CUDA tensors, bit for bit, in the same and in another
sharding; a lazy save sees the tensors as the trainer's stream leaves them
at save(). Skipped where torch sees no GPU (tools/dev/gpu-check.sh runs them
on a lent one)."""
import pytest
import torch

import ckpt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32,
          torch.uint8, torch.bool]


def random_bits(shape, dtype, seed):
    """Random bytes viewed as dtype (every bit pattern, NaNs included), on the GPU."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g, device="cuda").bool()
    size = torch.empty(0, dtype=dtype).element_size()
    n = 1
    for d in shape:
        n *= d
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g, device="cuda")
    return raw.view(dtype).reshape(shape)


def same_bytes(a, b):
    return torch.equal(a.contiguous().view(torch.uint8).cpu(), b.contiguous().view(torch.uint8).cpu())


def gpu_state(seed):
    # Two tensors inside one caching-allocator block: the second starts at an
    # offset into the allocation that CUDA IPC exports.
    block = random_bits((2, 4096), torch.float32, seed)
    state = {f"t.{str(dt).split('.')[-1]}": random_bits((33, 17), dt, seed + i)
             for i, dt in enumerate(DTYPES)}
    state.update({"block.first": block[0], "block.second": block[1],
                  "big": random_bits((1024, 1025), torch.bfloat16, seed + 99),
                  "empty": torch.zeros(0, 5, device="cuda"), "step": seed})
    return state


def blank_like(state):
    return {k: (torch.zeros_like(v) if isinstance(v, torch.Tensor) else None)
            for k, v in state.items()}


@pytest.mark.parametrize("save_with,load_with", [("pull", "pull"), ("push", "push"),
                                                 ("pull", "push")])
def test_cuda_state_round_trips_bit_exact(daemon, save_with, load_with):
    saved = gpu_state(7)
    with ckpt.Checkpointer(f"cuda-{save_with}", socket_path=daemon.socket,
                           gpu_transfer=save_with) as cp:
        cp.save(3, saved).wait_persisted()
    target = blank_like(saved)
    with ckpt.Checkpointer(f"cuda-{save_with}", socket_path=daemon.socket,
                           gpu_transfer=load_with) as cp:
        assert cp.load("latest", target) == 3
    assert target["step"] == 7
    for name, tensor in saved.items():
        if isinstance(tensor, torch.Tensor):
            assert target[name].is_cuda
            assert same_bytes(target[name], tensor), name


def test_cuda_and_cpu_tensors_load_into_each_other(daemon):
    gpu = random_bits((300, 77), torch.float32, 1)
    cpu = random_bits((45, 8), torch.bfloat16, 2).cpu()
    with ckpt.Checkpointer("mixed", socket_path=daemon.socket) as cp:
        cp.save(1, {"gpu": gpu, "cpu": cpu}).wait_persisted()
        into = {"gpu": torch.zeros(300, 77), "cpu": torch.zeros(45, 8, dtype=torch.bfloat16,
                                                                 device="cuda")}
        cp.load(1, into)
    assert not into["gpu"].is_cuda and into["cpu"].is_cuda
    assert same_bytes(into["gpu"], gpu) and same_bytes(into["cpu"], cpu)


def test_a_cuda_shard_loads_from_another_sharding(daemon):
    # Saved whole, loaded as a box of rows and columns: each row of the box is
    # its own strided run into device memory.
    whole = random_bits((64, 33), torch.float16, 5)
    flat = random_bits((1000,), torch.int32, 6)
    with ckpt.Checkpointer("reshard", socket_path=daemon.socket) as cp:
        cp.save(2, {"w": whole, "f": flat}).wait_persisted()
        box = torch.zeros(37, 20, dtype=torch.float16, device="cuda")
        part = torch.zeros(250, dtype=torch.int32, device="cuda")
        cp.load(2, {"w": ckpt.shard_box(box, (64, 33), (3, 5)),
                    "f": ckpt.shard_flat(part, (1000,), 600)})
    assert same_bytes(box, whole[3:40, 5:25])
    assert same_bytes(part, flat[600:850])


def test_a_lazy_save_sees_the_stream_as_left_at_save(daemon):
    # Long work on the trainer's stream (a kernel spinning ~1 s), then the
    # update; save() returns before the update has run, and the step must
    # hold the update.
    stream = torch.cuda.Stream()
    w = torch.zeros(2048, 2048, device="cuda")
    update = random_bits((2048, 2048), torch.float32, 11)
    torch.cuda.synchronize()
    with ckpt.Checkpointer("ordering", socket_path=daemon.socket) as cp:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(2_000_000_000)  # clock cycles
            w.copy_(update)
            handle = cp.save(1, {"w": w})
            assert not stream.query()  # the update is still queued
        handle.wait_snapshot()
        # After the snapshot the trainer may change the tensor at once.
        with torch.cuda.stream(stream):
            w.fill_(0)
        handle.wait_persisted()
        back = torch.empty_like(w)
        cp.load(1, {"w": back})
    assert same_bytes(back, update)
