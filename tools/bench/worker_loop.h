// What both kinds of bench rank (bench_worker.h on host memory,
// gpu_worker.h on a GPU) share: their answers, the names of tiers, and the
// training loop with a lazy save every K steps.
#ifndef CKPT_TOOLS_BENCH_WORKER_LOOP_H_
#define CKPT_TOOLS_BENCH_WORKER_LOOP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/client.h"

namespace ckpt::bench {

using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "error <status>" on one line.
std::string Reply(const absl::Status& s);

// "durable", "memory" or "both"; anything else is durable.
Tier TierNamed(const std::string& name);
// "memory" or "durable"; anything else is any.
LoadOptions::From FromNamed(const std::string& name);

// checkpoints * every training steps of compute_ms each (the host waits
// while the GPU computes), a save started by `save` every `every` steps and
// awaited right before the optimizer step would modify the tensors; then
// every save persisted. The stall of each checkpoint (the save call plus
// that wait), or the first error.
absl::StatusOr<std::vector<double>> LazySaves(
    const std::function<absl::StatusOr<std::shared_ptr<SaveHandle>>(int64_t step)>& save,
    int64_t step0, int checkpoints, int every, int compute_ms);

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_WORKER_LOOP_H_
