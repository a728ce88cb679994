#include "daemon/service/metrics_sampler.h"

#include "proto/lib/validation.h"

namespace ckpt::service {
namespace {

// A scrape lists the storage root and each job's directory. Bounded, so a
// root holding a huge number of entries cannot make every scrape slow;
// jobs past the bound are not counted.
constexpr size_t kMaxJobsListed = 10'000;

}  // namespace

metrics::NodeSample SampleNode(session::NodeContext& context) {
  metrics::NodeSample s;
  const pool::PoolStats pool = context.pool.Stats();
  s.pool_capacity_bytes = pool.capacity;
  s.pool_used_bytes = pool.used;
  s.pool_waiters = pool.waiters;
  s.pool_stall = pool.total_stall;
  s.pool_segment_renewals = pool.segment_renewals;
  const planning::PlanCacheStats plans = context.coordinator.plan_cache_stats();
  s.save_plan_cache_hits = plans.hits;
  s.save_plan_cache_misses = plans.misses;
  s.writer_queue_chunks = context.writers.queued_chunks();
  s.attached_ranks = context.sessions.attached();
  if (const std::optional<storage::RequestCounts> r = context.backend.Requests()) {
    s.storage_requests =
        metrics::StorageRequests{r->backend,  r->requests,   r->retries,       r->throttles,
                                 r->failures, r->bytes_sent, r->bytes_received};
  }
  if (tier::MemoryTier* memory = context.memory_tier; memory != nullptr) {
    s.memory_tier_budget_bytes = memory->budget_bytes();
    s.memory_tier_bytes = memory->bytes_held();
    s.memory_bytes_read = context.memory_bytes_read.load(std::memory_order_relaxed);
    const tier::PersistCounts persists = memory->persist_counts();
    s.memory_persists = persists.persisted;
    s.memory_persist_failures = persists.failed;
    for (const v1::MemoryTierJob& job : memory->Jobs()) {
      s.memory_tier_steps[job.job()] = job.steps_size();
    }
  }
  coordinator::Catalog& catalog = context.coordinator.catalog();
  absl::StatusOr<std::vector<std::string>> entries = context.backend.ListDir(catalog.root());
  if (!entries.ok()) return s;  // the gauge goes missing rather than lying
  size_t listed = 0;
  for (const std::string& job : *entries) {
    // Not every entry of the root is a job (a file, a name no job may have).
    if (!ValidateName("job", job).ok()) continue;
    if (++listed > kMaxJobsListed) break;
    absl::StatusOr<std::vector<int64_t>> steps = catalog.ListSteps(job);
    if (steps.ok() && !steps->empty()) s.checkpoints[job] = static_cast<int64_t>(steps->size());
  }
  return s;
}

}  // namespace ckpt::service
