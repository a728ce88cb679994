// `ckpt-bench --gpu`: the GPU path, measured against the link in the same
// run. The ranks (gpu_worker.h) hold their state on GPU 0; their saves go to
// the daemon's memory tier, so storage stays out of the figures, pulled
// over CUDA IPC (blocking, then lazily inside a training loop), and loads
// put it back into the GPU tensors (H2D). The floors: the same ranks'
// cudaMemcpyAsync of the same tensors into pinned host memory and back, and
// the daemon's pull alone (its CUDA runtime copying the ranks' IPC-mapped
// tensors into registered host memory, in this process, without gRPC or a
// plan). Without a GPU it prints why and returns kSkipped: no figures.
#ifndef CKPT_TOOLS_BENCH_GPU_BENCH_H_
#define CKPT_TOOLS_BENCH_GPU_BENCH_H_

#include "tools/bench/bench_run.h"

namespace ckpt::bench {

// The exit code of a run skipped for want of a GPU (ctest's and automake's
// convention).
inline constexpr int kSkipped = 77;

int RunGpu(const Config& c);

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_GPU_BENCH_H_
