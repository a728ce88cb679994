// Planning on several of the coordinator's cores (docs/design.md §4): the
// phases that make one message per unique item (a cluster's plan has
// millions) cut their items into contiguous parts, one per thread, each
// part's messages made by one thread. Arenas allocate safely from several
// threads, and no two threads touch one message, so the result is the
// same message for message whatever the thread count.
//
// Thread-safety: `fn` runs on several threads at once, each over its own
// range; it must not write what another range reads.
#ifndef CKPT_DAEMON_PLANNING_PARALLEL_FOR_H_
#define CKPT_DAEMON_PLANNING_PARALLEL_FOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"

namespace ckpt::planning {

// The threads a plan runs on: `requested` if positive, else the cores this
// process may run on, at most kDefaultPlanningThreadsMax: the phases are
// bound by memory more than by the cores, and each thread allocating on a
// plan's arena leaves the tail of its last block unused (megabytes each),
// which the plan cache counts.
inline constexpr int kDefaultPlanningThreadsMax = 8;
int PlanningThreads(int requested);

// The least work a range is given: tens of thousands of items, so that a
// small plan runs on one thread (starting one costs tens of microseconds).
inline constexpr uint64_t kMinWorkPerRange = 1 << 14;

// Calls fn(range, begin, end) over [0, n), whose elements hold `work` units
// in all (items, shards), cut into at most `threads` contiguous ranges of
// about `min_work` units or more each; range k is the k-th from the start
// and runs on a thread of its own but for the first, here. Returns the
// number of ranges, once every call returned. Runs the ranges one after
// the other if a thread cannot be started.
size_t ParallelFor(size_t n, int threads, uint64_t work, uint64_t min_work,
                   absl::FunctionRef<void(size_t range, size_t begin, size_t end)> fn);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_PARALLEL_FOR_H_
