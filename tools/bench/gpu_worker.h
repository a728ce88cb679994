// One rank of `ckpt-bench --gpu` (gpu_bench.h), run as a child process
// (`ckpt-bench --worker --gpu-worker ...`). Its shard of the model lives on
// GPU 0 (every rank shares it, as on a host with fewer GPUs than ranks), in
// cudaMalloc'd tensors as PyTorch allocates them; tensor t of rank r holds
// the byte 1 + r * 4 + t throughout, so a load puts back exactly that.
// Commands on stdin, one answer line each on stdout:
//
//   name                    -> name <the GPU's name>
//   floor d2h|h2d           -> ok <seconds to cudaMemcpyAsync the shard into
//                              pinned host memory, or back, a stream per tensor>
//   blocking <step> <tier>  -> ok <stall seconds> <save-to-commit seconds>
//   lazy <step0> <checkpoints> <every> <compute_ms> <tier>
//                           -> ok <stall seconds of each checkpoint...>
//   load <step> <from>      -> ok <seconds>, after the tensors were zeroed;
//                              every byte loaded is checked
//   export                  -> ok <handle-hex>:<offset>:<allocation bytes>:
//                              <device>:<bytes> per tensor (the IPC exports
//                              the daemon maps)
//   quit
//
// <tier>: durable, memory or both; <from>: any, memory or durable. Without
// CUDA compiled in it answers every command with an error.
#ifndef CKPT_TOOLS_BENCH_GPU_WORKER_H_
#define CKPT_TOOLS_BENCH_GPU_WORKER_H_

#include "tools/bench/bench_worker.h"

namespace ckpt::bench {

// Runs the command loop; returns the process exit code.
int RunGpuWorker(const WorkerOptions& options);

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_GPU_WORKER_H_
