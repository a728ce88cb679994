// The save plan cache (docs/design.md §4): a job that checkpoints the same
// shards on the same hosts step after step gets the assignment it got
// before, without planning again. Only the step and the user metadata may
// differ from the cached plan; they are validated and carried beside the
// cached assignment, which is shared, never copied (at cluster scale it is
// hundreds of megabytes: copying it was most of a hit's cost). Anything
// else (a shard, a rank, a host, the writer count, partial) misses and is
// planned afresh.
//
// The key is a SHA-256 digest of the plans (every field but step and
// metadata, plan_key.h): a collision would hand a job a wrong assignment,
// and none is found by chance or by construction, where a plain hash's
// could be. The cache holds one plan per job and at most `max_bytes` of assignments (the
// memory they take) in all, evicting the least recently used job's. A
// cache serves one set of planner options (one coordinator's).
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_PLANNING_PLAN_CACHE_H_
#define CKPT_DAEMON_PLANNING_PLAN_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/planning/plan_key.h"
#include "daemon/planning/save_planner.h"

namespace ckpt::planning {

// A save's plan: the assignment, shared with the cache, and this save's
// step and user metadata. The shared assignment's manifest template has
// those of the step that was planned first: Manifest() is the one this
// save commits.
struct SavePlan {
  std::shared_ptr<const v1::SaveAssignment> assignment;
  int64_t step = 0;
  google::protobuf::Map<std::string, std::string> user_metadata;

  v1::CheckpointManifest Manifest() const;
  // Its fields but the tensors (planned_manifest.h PlannedHeader), with
  // this save's step and metadata.
  v1::CheckpointManifest Header() const;
  // Manifest().ByteSizeLong(), counted a tensor at a time.
  uint64_t ManifestBytes() const;
};

struct PlanCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytes = 0;  // held now
  size_t jobs = 0;
};

class SavePlanCache {
 public:
  explicit SavePlanCache(uint64_t max_bytes = uint64_t{256} << 20) : max_bytes_(max_bytes) {}

  // PlanSave(nodes, options), or the cached assignment when the plans equal
  // the job's last ones but for step and user metadata. *hit says which.
  // `host_keys` are the plans' HostPlanKeys in their order (the coordinator
  // digests each as it arrives); the first overload digests them itself.
  absl::StatusOr<SavePlan> Plan(absl::Span<const v1::NodeSavePlan> nodes,
                                const SavePlannerOptions& options, bool* hit = nullptr);
  absl::StatusOr<SavePlan> Plan(absl::Span<const v1::NodeSavePlan> nodes,
                                absl::Span<const std::string> host_keys,
                                const SavePlannerOptions& options, bool* hit = nullptr);
  PlanCacheStats Stats() const;

 private:
  // Immutable once cached: compared and copied outside mu_ (a cluster's
  // plan is hundreds of megabytes; other jobs must not wait on it).
  struct Cached {
    std::string key;
    std::shared_ptr<const v1::SaveAssignment> assignment;
  };
  struct Entry {
    std::shared_ptr<const Cached> cached;
    uint64_t bytes = 0;
    uint64_t last_use = 0;
  };
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by job
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_PLAN_CACHE_H_
