// The saves in flight at the coordinator (coordinator.h PlanSave): each
// save's hosts' plans gathered until every rank of the job arrived
// (planning::RankBarrier), planned once together (the plan cache, the
// barrier skip of a job's known layout, the memory tier's copies), then the
// hosts' reports gathered until the last one, which the coordinator commits
// (committer.h) and hands back here (Committed). Saves fail, on every host,
// when a plan is bad, a host is lost or gives up, or a deadline passes;
// ended ones are remembered for late callers.
//
// Thread-safety: all methods are safe from any thread. mu_ guards the saves
// and the known layouts; it is never held while planning, touching storage
// or calling into another part of the coordinator. A save's gathered plans
// are written only while it gathers and read by its one planner after; its
// plan and reports are fixed once it is committing, and read without mu_.
// ServeClusterMemoryTier is called once, before serving.
#ifndef CKPT_DAEMON_COORDINATOR_SAVE_GATHERING_H_
#define CKPT_DAEMON_COORDINATOR_SAVE_GATHERING_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/host_ranks.h"
#include "daemon/coordinator/rendezvous.h"
#include "daemon/planning/plan_cache.h"
#include "daemon/planning/save_planner.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

class SaveGathering {
 public:
  struct ActiveSave;  // save_gathering.cc
  using SaveRef = std::shared_ptr<ActiveSave>;

  SaveGathering(storage::Backend& backend, Catalog& catalog, HostRanks& host_ranks,
                planning::SavePlannerOptions options, RendezvousOptions rendezvous);

  planning::PlanCacheStats plan_cache_stats() const { return plan_cache_.Stats(); }
  uint64_t barrier_skips() const;
  size_t saves_in_flight() const;

  // Coordinator::PlanSave.
  absl::StatusOr<v1::SaveAssignment> PlanSave(const v1::NodeSavePlan& node, const CallerGone& gone);

  // One host's report, recorded.
  struct Reported {
    SaveRef save;
    // The last report: the save is committing, the caller commits it with
    // what follows (fixed until Committed), then calls Committed.
    bool last = false;
    std::string job;
    std::string partial_dir;
    planning::SavePlan plan;  // its manifest as planned
    int64_t created_unix_ms = 0;
    const std::map<std::string, v1::NodePersistReport>* reports = nullptr;
  };
  // Checks and records one host's files and checksums (only its own).
  absl::StatusOr<Reported> Report(const v1::NodePersistReport& report);
  // The commit of the last report ended with `status` (`manifest`: the
  // committed one serialized, for the memory tier): the save ends, and
  // waiting hosts learn it. The save's result, or its error once its
  // partial directory is removed.
  absl::StatusOr<v1::CommitResult> Committed(const Reported& reported, const absl::Status& status,
                                             std::string manifest);
  // Called by the commit just before its point of no return (the rename):
  // the error of a host lost while the save was committing, which the
  // hosts waiting for the commit have been told already; OK, and from then
  // on a host lost no longer fails the save, otherwise.
  absl::Status PassCommitPoint(const SaveRef& save);
  // A host that reported before the last: waits for the save's end. When
  // the caller goes first, the save fails (the host may remove its files).
  absl::StatusOr<v1::CommitResult> AwaitCommit(const SaveRef& save, const std::string& host,
                                               const CallerGone& gone);

  // Coordinator::AbortSave, HostLost (for saves), HostRegistered,
  // ExpireSaves (also failing saves that wait for a lost host's ranks),
  // FailedSaves, KnowsSave, SaveInFlight.
  bool AbortSave(const v1::AbortSaveRequest& request);
  // Every save in flight fails with `error` (this coordinator stopped
  // leading: docs/failover.md), its partial directory removed, and the
  // jobs' last layouts are forgotten (a later term plans afresh). A save
  // already committing ends as its commit does (the fence decides).
  void AbortAll(const absl::Status& error);
  void HostLost(const std::string& host, const std::string& reason);
  void HostRegistered(const std::string& host);
  void ExpireSaves(absl::Time now);
  std::vector<std::pair<std::string, std::string>> FailedSaves(
      absl::Span<const std::string> save_ids);
  bool KnowsSave(const std::string& save_id) const;
  bool SaveInFlight(const std::string& job, int64_t step) const;

  // Coordinator::ServeClusterMemoryTier.
  void ServeClusterMemoryTier(int replicas, int erasure_k, int erasure_m) {
    memory_cluster_ = true;
    replicas_ = replicas;
    erasure_k_ = erasure_k;
    erasure_m_ = erasure_m;
  }
  bool memory_cluster() const { return memory_cluster_; }

 private:
  // Hosts' parts of a plan, by host name; shared between a save's answers
  // and the layout remembered from it.
  using Parts = std::map<std::string, std::shared_ptr<const v1::HostAssignment>>;
  // A job's last layout over hosts, by host: what a host's plan must equal
  // (serialized, step and metadata cleared) to be answered at once.
  struct KnownLayout {
    int world_size = 0;
    uint64_t chunk_bytes = 0;
    std::map<std::string, std::string> keys;
    Parts parts;
    uint64_t bytes = 0;
  };

  const std::string& root() const { return catalog_.root(); }
  // Joins (or opens) the save of node's job and step; the save, and whether
  // this caller completed the gathering and must plan it, or may go on at
  // once with its part of the job's known layout (*early).
  absl::StatusOr<SaveRef> JoinSave(const v1::NodeSavePlan& node, bool* plan_it, bool* early);
  // The host that sent `rank` for `save` (this host when none before it).
  static std::string RankHost(const ActiveSave& save, int rank, const std::string& host);
  // The early host's answer, once the partial directory exists.
  absl::StatusOr<v1::SaveAssignment> AnswerEarly(const SaveRef& save, const v1::HostIdentity& host);
  void RememberLayoutLocked(const ActiveSave& save) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetLayoutLocked(const std::string& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlanGathered(const SaveRef& save) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails the save unless it ended; true if this call failed it.
  bool FailLocked(ActiveSave& save, const absl::Status& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLocked(ActiveSave& save) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitGathered(ActiveSave& save, const std::string& host, const CallerGone& gone)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status GatheringTimeout(const ActiveSave& save) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A save gathering past the lost-ranks grace whose missing ranks a lost
  // host carried: the error naming it.
  std::optional<absl::Status> LostCarrierLocked(const ActiveSave& save, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SaveRef FindLocked(const std::string& save_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  storage::Backend& backend_;
  Catalog& catalog_;
  HostRanks& host_ranks_;  // locks itself (a leaf)
  const planning::SavePlannerOptions options_;
  const RendezvousOptions rendezvous_;
  planning::SavePlanCache plan_cache_;  // locks itself
  mutable absl::Mutex mu_;
  std::map<std::string, SaveRef> saves_ ABSL_GUARDED_BY(mu_);        // by save_id, ended ones too
  std::deque<std::string> ended_ ABSL_GUARDED_BY(mu_);               // oldest first
  std::map<std::string, KnownLayout> layouts_ ABSL_GUARDED_BY(mu_);  // by job
  uint64_t layout_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t barrier_skips_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> lost_hosts_ ABSL_GUARDED_BY(mu_);
  bool memory_cluster_ = false;  // set before serving
  int replicas_ = 0;
  int erasure_k_ = 0;
  int erasure_m_ = 0;
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_SAVE_GATHERING_H_
