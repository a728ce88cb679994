// How hosts meet at the coordinator: the options every gathering shares
// (saves and loads spread over hosts), and the wait a gathering's handler
// thread does until the others arrive or its caller goes away.
#ifndef CKPT_DAEMON_COORDINATOR_RENDEZVOUS_H_
#define CKPT_DAEMON_COORDINATOR_RENDEZVOUS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/planning/plan_budget.h"
#include "daemon/planning/rank_barrier.h"

namespace ckpt::coordinator {

// How a save spread over hosts meets at the coordinator.
struct RendezvousOptions {
  // How long hosts that sent their plans wait for the rest of the job's
  // ranks before the save fails naming the ranks that never came.
  absl::Duration plan_timeout = absl::Seconds(120);
  // Saves being planned, written or committed at once (beyond:
  // RESOURCE_EXHAUSTED), and ended ones remembered for late callers.
  size_t max_active_saves = 1024;
  size_t ended_saves_kept = 1024;  // at least 1
  // How long hosts may write once planned before the save fails naming
  // those that have not reported (ExpireSaves).
  absl::Duration write_timeout = absl::Seconds(300);
  // Memory the save plan cache may hold (plan_cache.h): a job's plan at
  // thousands of ranks takes hundreds of megabytes; one larger than this
  // is planned afresh every step. Jobs' known layouts (the barrier skip)
  // are kept within the same bound.
  uint64_t plan_cache_bytes = uint64_t{1} << 30;
  // A save or load still gathering this long whose missing ranks a lost
  // host carried fails, naming it (host_ranks.h). Not at once: a job
  // restarted without that host attaches its ranks elsewhere, and their
  // hosts say so in their next heartbeat (so: two heartbeat intervals).
  absl::Duration lost_ranks_grace = absl::Seconds(2);
  // Memory the save and load planners may take at once, over all jobs
  // (plan_budget.h, --plan_memory_mib); a plan waits for room up to
  // plan_timeout. Null: unbounded.
  std::shared_ptr<planning::PlanBudget> plan_budget = nullptr;
};

// True once the caller of a blocking method has gone (its RPC was
// cancelled): the method returns CANCELLED instead of waiting on.
using CallerGone = std::function<bool()>;

// Waits on `mu` until `done` or the caller is gone; false if gone. Wakes
// now and then to notice a caller that went away: a dead host must not
// hold a handler thread until the end.
bool AwaitUnlessGone(absl::Mutex& mu, const std::function<bool()>& done, const CallerGone& gone)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

// A gathering's deadline passed: DEADLINE_EXCEEDED naming the first ranks
// of `ranks` that never came, and how many, after `plan_timeout`.
absl::Status RanksNeverCame(const planning::RankBarrier& ranks, absl::Duration plan_timeout);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_RENDEZVOUS_H_
