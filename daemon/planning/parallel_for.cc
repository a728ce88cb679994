#include "daemon/planning/parallel_for.h"

#include <sched.h>

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

namespace ckpt::planning {

int PlanningThreads(int requested) {
  if (requested > 0) return requested;
  // The cores this process may run on (a container's cpuset, taskset), not
  // the machine's.
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
    cores = std::max(1, CPU_COUNT(&allowed));
  return std::min(cores, kDefaultPlanningThreadsMax);
}

size_t ParallelFor(size_t n, int threads, uint64_t work, uint64_t min_work,
                   absl::FunctionRef<void(size_t range, size_t begin, size_t end)> fn) {
  const uint64_t most =
      std::max<uint64_t>(1, std::min<uint64_t>(n, work / std::max<uint64_t>(1, min_work)));
  const size_t ranges = static_cast<size_t>(std::min<uint64_t>(std::max(1, threads), most));
  const auto bound = [&](size_t k) { return n * k / ranges; };
  std::vector<std::thread> started;
  started.reserve(ranges - 1);
  size_t inline_from = 1;  // ranges this thread runs after its first
  for (size_t k = 1; k < ranges; ++k) {
    try {
      started.emplace_back([&fn, k, b = bound(k), e = bound(k + 1)] { fn(k, b, e); });
    } catch (const std::system_error&) {
      break;  // no thread to be had (RLIMIT_NPROC, memory): the rest here
    }
    inline_from = k + 1;
  }
  fn(0, bound(0), bound(1));
  for (size_t k = inline_from; k < ranges; ++k) fn(k, bound(k), bound(k + 1));
  for (std::thread& thread : started) thread.join();
  return ranges;
}

}  // namespace ckpt::planning
