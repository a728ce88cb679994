// One simulated training rank of ckpt-bench, run as a child process of the
// bench (`ckpt-bench --worker ...`). It holds its shard of the model in
// pre-faulted host memory and executes one-line commands from stdin,
// answering each with one line on stdout, so the bench can run every rank
// through the same phase at the same time and collect their timings:
//
//   floor                   -> ok <seconds to memcpy the shard out of its tensors>
//   floor in                -> ok <seconds to memcpy a copy of the shard into its
//                              tensors> (they then hold that copy's bytes)
//   trained <seed>          -> ok 0 (the shard now holds values like trained
//                              weights': synthetic_model.h)
//   blocking <step> [<tier> [<codec>]]
//                           -> ok <stall seconds> <save-to-commit seconds>
//   lazy <step0> <checkpoints> <every> <compute_ms>
//                           -> ok <stall seconds of each checkpoint...>
//   baseline <dir>          -> ok <seconds to write+fsync the shard>
//   load                    -> ok <seconds to load the latest step>
//   quit
#ifndef CKPT_TOOLS_BENCH_BENCH_WORKER_H_
#define CKPT_TOOLS_BENCH_BENCH_WORKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/types.h"

namespace ckpt::bench {

struct WorkerOptions {
  std::string socket;
  std::string job = "bench";
  int rank = 0;
  int world = 1;
  uint64_t state_bytes = 0;  // of the whole model, all ranks together
  int copy_threads = 4;
  bool gpu_push = false;  // GPU ranks: ClientOptions::GpuTransfer::kPush
  bool load = false;      // shards start zeroed, to be filled by `load`
};

// The model: kTensors float32 matrices of 4096 columns whose rows are split
// across the ranks (tensor-parallel boxes).
std::vector<HostTensor> BenchShards(uint64_t state_bytes, int rank, int world);

// Runs the command loop; returns the process exit code.
int RunWorker(const WorkerOptions& options);

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_BENCH_WORKER_H_
