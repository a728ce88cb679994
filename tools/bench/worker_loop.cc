#include "tools/bench/worker_loop.h"

#include <thread>

namespace ckpt::bench {

std::string Reply(const absl::Status& s) {
  std::string m(s.ToString());
  for (char& c : m) {
    if (c == '\n') c = ' ';
  }
  return "error " + m;
}

Tier TierNamed(const std::string& name) {
  return name == "memory" ? Tier::kMemory
         : name == "both" ? Tier::kMemoryAndDurable
                          : Tier::kDurable;
}

LoadOptions::From FromNamed(const std::string& name) {
  return name == "memory"    ? LoadOptions::From::kMemory
         : name == "durable" ? LoadOptions::From::kDurable
                             : LoadOptions::From::kAny;
}

absl::StatusOr<std::vector<double>> LazySaves(
    const std::function<absl::StatusOr<std::shared_ptr<SaveHandle>>(int64_t step)>& save,
    int64_t step0, int checkpoints, int every, int compute_ms) {
  std::vector<double> stalls;
  std::vector<std::shared_ptr<SaveHandle>> handles;
  absl::Status status;
  for (int64_t i = 0; i < int64_t{checkpoints} * every && status.ok(); ++i) {
    std::shared_ptr<SaveHandle> pending;
    double stall = 0;
    if (i % every == 0) {
      const auto start = Clock::now();
      absl::StatusOr<std::shared_ptr<SaveHandle>> handle = save(step0 + i);
      stall += Since(start);
      if (handle.ok()) {
        pending = *handle;
      } else {
        status = handle.status();
      }
    }
    // The forward and backward pass: the GPU computes, the host waits.
    std::this_thread::sleep_for(std::chrono::milliseconds(compute_ms));
    if (pending) {
      // Right before the optimizer step modifies the tensors.
      const auto start = Clock::now();
      status.Update(pending->WaitSnapshot());
      stalls.push_back(stall + Since(start));
      handles.push_back(pending);
    }
  }
  for (auto& h : handles) status.Update(h->WaitPersisted());
  if (!status.ok()) return status;
  return stalls;
}

}  // namespace ckpt::bench
