// The coordinator's commits (coordinator.h): a gathered save whose hosts
// all reported, and a checkpoint copied in whole from another store, each
// made visible by the commit protocol (commit.h), then the job's retention
// (retention_runner.h). It knows nothing of the saves in flight: the
// coordinator asks the save gathering (save_gathering.h) first.
//
// Thread-safety: all methods are safe from any thread. Commits run one at
// a time under mu_, because LATEST and LATEST.next of a job are written by
// one commit at a time (commit.h); mu_ guards that protocol on disk, no
// state in memory. Callers hold no lock of the coordinator's other parts
// when they call in.
// EnableRetention is called once, before serving.
#ifndef CKPT_DAEMON_COORDINATOR_COMMITTER_H_
#define CKPT_DAEMON_COORDINATOR_COMMITTER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/epoch_fence.h"
#include "daemon/coordinator/retention.h"
#include "daemon/coordinator/retention_runner.h"
#include "daemon/planning/plan_cache.h"
#include "daemon/planning/retention_policy.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

// A coordinator elected through etcd fences its commits (epoch_fence.h).
struct CommitFencing {
  std::function<int64_t()> epoch;  // the current term's; 0: no fence
  StillLeading still_leading;      // asked in the fence and again just before the commit
};

class Committer {
 public:
  Committer(storage::Backend& backend, Catalog& catalog);

  // A save whose hosts all reported: its manifest, made from its plan with
  // their checksums (saved_manifest.h), and `partial_dir` committed,
  // making the step latest. With manifest_out, the committed manifest
  // serialized. Retention is the caller's to ask for (Retain), once the
  // save is ended. `commit_point`: CommitCheckpoint's.
  absl::Status CommitSave(const planning::SavePlan& plan, int64_t created_unix_ms,
                          const std::map<std::string, v1::NodePersistReport>& reports,
                          const std::string& partial_dir, std::string* manifest_out = nullptr,
                          const std::function<absl::Status()>& commit_point = nullptr);
  // Coordinator::CommitCopy once no save of the step is in flight: the
  // step's path once committed, retention run after it.
  absl::StatusOr<std::string> CommitCopy(
      const v1::CheckpointManifest& manifest,
      const std::function<absl::Status(const std::string& partial_dir)>& copy);
  // A step of `job` was committed: its retention runs (when enabled).
  void Retain(const std::string& job);

  void EnableRetention(planning::RetentionConfig config);
  // Call once, before serving.
  void FenceCommits(CommitFencing fencing) { fencing_ = std::move(fencing); }
  // Commits the fence refused: a newer leader had committed to the job.
  uint64_t fenced_commits() const { return fenced_commits_.load(std::memory_order_relaxed); }
  const planning::RetentionConfig& retention() const { return retention_config_; }
  GarbageCollector& garbage_collector() { return gc_; }

 private:
  storage::Backend& backend_;
  Catalog& catalog_;
  // The job's fence for a commit under the current epoch; null without
  // an election. Counts refusals.
  struct Fenced {
    std::unique_ptr<EpochFence> fence;         // null without an election
    std::function<absl::Status()> still_ours;  // the entering term still leads
  };
  absl::StatusOr<Fenced> EnterFence(const std::string& job);
  // commit_point with the term asked first (a refusal is counted).
  std::function<absl::Status()> FencedCommitPoint(const Fenced& fenced,
                                                  const std::function<absl::Status()>& point) const;

  absl::Mutex mu_;         // one commit at a time; guards the protocol on disk
  CommitFencing fencing_;  // set before serving
  mutable std::atomic<uint64_t> fenced_commits_{0};
  GarbageCollector gc_;
  planning::RetentionConfig retention_config_;  // set before serving
  std::unique_ptr<RetentionRunner> retention_;  // last: stops before gc_ goes
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_COMMITTER_H_
