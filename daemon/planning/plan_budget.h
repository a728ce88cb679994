// The memory the coordinator's planners may take at once (--plan_memory_mib),
// over every job's save and load plans. A plan reserves its scratch, as
// estimated from its inputs (SaveScratchBytes, LoadScratchBytes), before it
// starts, and gives it back when done. A plan that does not fit waits for
// others to finish: each holds one reservation and asks for no other, so
// waits end when the plans ahead of it do. A plan larger than the whole
// budget is refused at once, RESOURCE_EXHAUSTED naming the flag and the
// estimate; one that waits past its deadline, DEADLINE_EXCEEDED naming
// what the others hold. Without it, several jobs planning at once (or one
// job of 100,000 ranks) grew the coordinator without bound.
//
// The plan cache has a budget of its own (--plan_cache_mib): a cached plan
// is kept between steps; scratch is not.
//
// Thread-safety: safe from any thread.
#ifndef CKPT_DAEMON_PLANNING_PLAN_BUDGET_H_
#define CKPT_DAEMON_PLANNING_PLAN_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/planning/column_manifest.h"

namespace ckpt::planning {

class PlanBudget {
 public:
  // `bytes`: what all plans together may hold (at least 1).
  explicit PlanBudget(uint64_t bytes);
  PlanBudget(const PlanBudget&) = delete;
  PlanBudget& operator=(const PlanBudget&) = delete;

  // Held while a plan runs; gives its bytes back when destroyed.
  class Reservation {
   public:
    Reservation(Reservation&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_) {
      other.budget_ = nullptr;
    }
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    ~Reservation();

   private:
    friend class PlanBudget;
    Reservation(PlanBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    PlanBudget* budget_;
    uint64_t bytes_;
  };

  // Waits until `bytes` fit beside what other plans hold, up to `wait`.
  // `what` names the plan in errors ("the save of job j step 5").
  absl::StatusOr<Reservation> Reserve(uint64_t bytes, absl::string_view what, absl::Duration wait);

  uint64_t limit() const { return limit_; }
  uint64_t in_use() const;
  // Plans waiting for room now.
  int waiting() const;
  // Blocks until `count` plans wait (for tests: no sleeping).
  void AwaitWaiting(int count) const;

 private:
  // What a waiter waits for: room for `bytes`, or (Waiting) that many
  // waiters.
  struct Want {
    PlanBudget* budget;
    uint64_t bytes;
  };
  static bool Fits(Want* want) ABSL_NO_THREAD_SAFETY_ANALYSIS;     // under mu_
  static bool Waiting(Want* want) ABSL_NO_THREAD_SAFETY_ANALYSIS;  // under mu_
  void Release(uint64_t bytes);

  const uint64_t limit_;
  mutable absl::Mutex mu_;
  uint64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

// What planning a save of these hosts' plans takes, at most: per shard the
// hosts list (each replica's too, as the planner walks them) its lookups
// and, for a distinct one, its item, its assignment and manifest entry.
// Measured with ckpt-plan-bench (docs/measuring.md) and rounded up.
uint64_t SaveScratchBytes(absl::Span<const v1::NodeSavePlan> nodes);

// The same for a load of `manifest`: per request its lookups and copies,
// per stored chunk its read (at most every chunk is read) and its share of
// the spread over hosts.
uint64_t LoadScratchBytes(absl::Span<const v1::NodeLoadPlan> nodes, const ColumnManifest& manifest);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_PLAN_BUDGET_H_
