// The coordinator role, embedded in ckptd when no coordinator address is
// configured (DESIGN.md §2). It owns the catalog, plans saves and loads with
// the pure planners, tracks saves between plan and commit, and runs the
// commit protocol. Every message carries host identity, so a networked
// CoordinatorService can wrap this class unchanged. Errors of PlanSave and
// ReportPersisted say what failed, not which save: the node's save session
// that calls them names the job and step once.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_COORDINATOR_COORDINATOR_H_
#define CKPT_DAEMON_COORDINATOR_COORDINATOR_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/plan_cache.h"
#include "daemon/coordinator/retention.h"
#include "daemon/coordinator/retention_policy.h"
#include "daemon/coordinator/retention_runner.h"
#include "daemon/coordinator/save_planner.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

class Coordinator {
 public:
  // `catalog` names this daemon (host, instance) for its partial
  // directories and bounds the manifests it reads; the defaults take
  // gethostname() and a random instance id.
  Coordinator(storage::Backend& backend, std::string root, SavePlannerOptions options,
              CatalogOptions catalog = {});

  Catalog& catalog() { return catalog_; }
  PlanCacheStats plan_cache_stats() const { return plan_cache_.Stats(); }
  GarbageCollector& garbage_collector() { return gc_; }
  const std::string& root() const { return catalog_.root(); }

  // Plans a save of the single host this embedded coordinator serves and
  // creates its partial directory (named by host and instance; the root is
  // fsynced when the job directory is new). A step lower than committed
  // ones is allowed and becomes latest when it commits. ALREADY_EXISTS when the step is
  // committed, FAILED_PRECONDITION when the same step is being saved.
  absl::StatusOr<v1::SaveAssignment> PlanSave(const v1::NodeSavePlan& node);
  // Fills the checksums into the manifest and commits (commit.h). OK once
  // the rename is durable, whatever happens to LATEST afterwards.
  absl::StatusOr<v1::CommitResult> ReportPersisted(const v1::NodePersistReport& report);
  // Forgets the save and removes its partial directory. Idempotent.
  void AbortSave(const std::string& save_id, const std::string& reason);
  // With `pin`, the step is pinned (retention.h PinStep) before its
  // manifest is read, and *pin holds the pin: gc does not delete the step
  // while the caller keeps it.
  absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::NodeLoadPlan& node,
                                              std::unique_ptr<storage::FileLock>* pin = nullptr);

  // Retention after each commit (retention_runner.h), and the grace period
  // of a `ckptctl gc` that names none. Call once, before serving.
  void EnableRetention(RetentionConfig config);
  const RetentionConfig& retention() const { return retention_config_; }

 private:
  struct ActiveSave {
    v1::SaveAssignment assignment;
    std::string partial_dir;  // absolute
  };

  storage::Backend& backend_;
  Catalog catalog_;
  const SavePlannerOptions options_;
  SavePlanCache plan_cache_;
  absl::Mutex mu_;
  std::map<std::string, ActiveSave> saves_ ABSL_GUARDED_BY(mu_);  // by save_id
  // Commits run one at a time: LATEST and LATEST.next of a job are written
  // by one commit at a time (commit.h).
  absl::Mutex commit_mu_;
  GarbageCollector gc_;
  RetentionConfig retention_config_;
  std::unique_ptr<RetentionRunner> retention_;  // last: stops before gc_ goes
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_COORDINATOR_H_
