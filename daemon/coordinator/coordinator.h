// The coordinator role, embedded in ckptd when no coordinator address is
// configured (docs/design.md §2). It owns the catalog, plans saves and loads with
// the pure planners, tracks saves between plan and commit, and runs the
// commit protocol. Every message carries host identity, so the networked
// CoordinatorService (coordinator_service.h) wraps this class unchanged: a
// save of a job spread over hosts meets here, one plan per host. Errors of PlanSave and
// ReportPersisted say what failed, not which save: the node's save session
// that calls them names the job and step once.
//
// This class is a facade over three parts, each with its own lock:
//   SaveGathering (save_gathering.h)  the saves in flight, from the first
//                                     host's plan to the last report
//   Committer (committer.h)           commits, one at a time, and retention
//   LoadGathering (load_gathering.h)  loads, and the gathering of those
//                                     spanning hosts
// It owns the catalog they share and composes them; no part calls another,
// and the facade holds no lock of its own, so no two parts' locks are ever
// held at once. A lost host is told to both gatherings.
//
// Thread-safety: all methods are safe from any thread; the ones marked
// "call once, before serving" excepted.
#ifndef CKPT_DAEMON_COORDINATOR_COORDINATOR_H_
#define CKPT_DAEMON_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/committer.h"
#include "daemon/coordinator/host_ranks.h"
#include "daemon/coordinator/load_gathering.h"
#include "daemon/coordinator/partial_dir.h"
#include "daemon/coordinator/rendezvous.h"
#include "daemon/coordinator/retention.h"
#include "daemon/coordinator/save_gathering.h"
#include "daemon/planning/plan_cache.h"
#include "daemon/planning/retention_policy.h"
#include "daemon/planning/save_planner.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

// RendezvousOptions and CallerGone: rendezvous.h.

class Coordinator {
 public:
  // `catalog` names this daemon (host, instance) for its partial
  // directories and bounds the manifests it reads; the defaults take
  // gethostname() and a random instance id.
  Coordinator(storage::Backend& backend, std::string root, planning::SavePlannerOptions options,
              CatalogOptions catalog = {}, RendezvousOptions rendezvous = {});

  Catalog& catalog() { return catalog_; }
  storage::Backend& backend() { return backend_; }
  planning::PlanCacheStats plan_cache_stats() const { return saves_.plan_cache_stats(); }
  // Hosts answered without waiting for the rest of their job: their plan
  // equalled their part of the job's last layout (the plan cache's skip of
  // the planning barrier; the commit still waits for every host).
  uint64_t barrier_skips() const;
  // Saves between their first host's plan and their end.
  size_t saves_in_flight() const;
  GarbageCollector& garbage_collector() { return committer_.garbage_collector(); }
  const std::string& root() const { return catalog_.root(); }

  // One host's part of a save (docs/design.md §4.2). Blocks until the plans of
  // all `world_size` ranks of the job's step have arrived from their hosts
  // (at once when this host holds them all), then plans them together,
  // creates the partial directory (named by this coordinator's host and
  // instance; the root is fsynced when the job directory is new), and
  // returns the caller's part: hosts holds its HostAssignment only, and the
  // manifest template comes along only for a single-host save. A step lower
  // than committed ones is allowed and becomes latest when it commits.
  // ALREADY_EXISTS when the step is committed, FAILED_PRECONDITION when the
  // same step is being saved, and the save's error when it fails meanwhile
  // (another host's plan was invalid, a host was lost, ranks never came).
  //
  // A host whose plan equals its part of the job's last layout (the same
  // shards, ranks and hosts as the previous step) gets its part at once
  // and may write and report before the others arrive. When the rest
  // arrive with another layout, the save fails on every host, naming the
  // change (those hosts began from the old plan); a retry plans afresh.
  absl::StatusOr<v1::SaveAssignment> PlanSave(const v1::NodeSavePlan& node,
                                              const CallerGone& gone = {});
  // Records one host's files and checksums. The last host to report fills
  // them into the manifest and commits (commit.h); the others wait for it.
  // OK, on every host, once the rename is durable, whatever happens to
  // LATEST afterwards.
  absl::StatusOr<v1::CommitResult> ReportPersisted(const v1::NodePersistReport& report,
                                                   const CallerGone& gone = {});
  // Fails the save on every host and removes its partial directory: by id,
  // or by job and step (while it is still gathering plans, or any time: an
  // operator's cancel). Idempotent; a second abort removes the directory
  // again (a host may have still been creating its files when the first
  // one ran). True if this call failed a save in flight.
  bool AbortSave(const v1::AbortSaveRequest& request);
  void AbortSave(const std::string& save_id, const std::string& reason);
  // A live host's heartbeat: the ranks of jobs spread over hosts it
  // carries (host_ranks.h).
  void HostCarries(const std::string& host,
                   const google::protobuf::RepeatedPtrField<v1::CarriedJob>& jobs);
  // The registry lost `host` (no heartbeat, or it restarted): every save
  // and load it takes part in fails, naming it and its ranks -- those its
  // plan brought, or, before its plan came, those its heartbeats said it
  // carries -- and it may join none until HostRegistered (a plan racing
  // the loss is refused, not left waiting). A save or load of a job whose
  // ranks it carried, begun later, fails too (ExpireSaves), until it
  // registers again or another host carries those ranks. A save
  // committing when the host is lost fails unless its commit passed the
  // rename.
  void HostLost(const std::string& host, const std::string& reason);
  void HostRegistered(const std::string& host);
  // This coordinator stopped leading (docs/failover.md): every save in
  // flight and every load gathering fails with `reason` on every host
  // (save_gathering.h, load_gathering.h AbortAll).
  void AbortAll(const std::string& reason);
  // Commits fenced by the leader's epoch (epoch_fence.h). Call once,
  // before serving.
  void FenceCommits(CommitFencing fencing) { committer_.FenceCommits(std::move(fencing)); }
  uint64_t fenced_commits() const { return committer_.fenced_commits(); }
  // Fails saves past their deadline: gathering (ranks that never came) or
  // writing (hosts that never reported), whether or not a host waits on
  // them; and saves and loads gathering past the lost-ranks grace
  // (rendezvous.h) that wait for ranks a lost host carried. The registry's
  // sweeper calls it.
  void ExpireSaves(absl::Time now);
  // Of `save_ids`, those that failed or that this coordinator does not know
  // (it restarted), with the reason: heartbeats carry it to the hosts.
  std::vector<std::pair<std::string, std::string>> FailedSaves(
      absl::Span<const std::string> save_ids);
  // Whether a save of this id is, or was lately, here (in flight or ended).
  bool KnowsSave(const std::string& save_id) const;
  // Whether a save of the job's step is in flight here.
  bool SaveInFlight(const std::string& job, int64_t step) const;
  // With `pin`, the step is pinned (retention.h PinStep) before its
  // manifest is read, and *pin holds the pin: gc does not delete the step
  // while the caller keeps it.
  absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::NodeLoadPlan& node,
                                              std::unique_ptr<storage::FileLock>* pin = nullptr);
  // A load whose world spans hosts (node.world_size() above its ranks):
  // waits, like a save, until every host of the job sent its plan, plans
  // them once, and answers each host with its part: each needed chunk read
  // by one host and forwarded to the others (load_spread.h), when every
  // host has a peer data channel; else each host reads what it needs. Fails
  // every host, naming the ranks, when some never come within the plan
  // timeout, or naming the host when one is lost or gives up. The caller
  // pins the step itself (its own storage root).
  absl::StatusOr<v1::LoadAssignment> PlanSpanningLoad(const v1::NodeLoadPlan& node,
                                                      const CallerGone& gone = {});
  size_t loads_gathering() const;

  // A checkpoint copied here whole from another store (the memory tier's
  // persistence, daemon/tier/memory_tier.h): creates a partial directory,
  // has `copy` fill it (data files written and fsynced, as a host's would
  // be before it reports), then commits `manifest` as a save's last report
  // does (one commit at a time; retention after it), except that it becomes
  // latest only when newer than the latest step here. The step's path once
  // committed. ALREADY_EXISTS when the step is committed here already,
  // FAILED_PRECONDITION while a save of it is in flight here.
  absl::StatusOr<std::string> CommitCopy(
      const v1::CheckpointManifest& manifest,
      const std::function<absl::Status(const std::string& partial_dir)>& copy);

  // Retention after each commit (retention_runner.h), and the grace period
  // of a `ckptctl gc` that names none. Call once, before serving.
  void EnableRetention(planning::RetentionConfig config);
  const planning::RetentionConfig& retention() const { return committer_.retention(); }

  // This coordinator is the cluster coordinator's memory tier: a save
  // spread over hosts is written in the hosts' memory, each host's files
  // copied to the `replicas` hosts after it (replica_placement.h), and the
  // commit's result carries the manifest for every host to commit beside
  // its files. Here only the manifest is kept. Call once, before serving.
  // With erasure_k > 0 each group of k+m hosts is erasure coded instead
  // (replica_placement.h PlaceErasure); the stripes are kept with the
  // step (kErasureFile) for loads that must rebuild.
  void ServeClusterMemoryTier(int replicas, int erasure_k = 0, int erasure_m = 0) {
    saves_.ServeClusterMemoryTier(replicas, erasure_k, erasure_m);
  }
  // The step's stripes (ErasurePlan, serialized), beside its MANIFEST
  // (partial_dir.h).
  static constexpr const char* kErasureFile = coordinator::kErasureFile;
  // The memory tier's catalog, where a load spread over hosts that may
  // come from memory looks first (PlanSpanningLoad). Call once, before
  // serving.
  void LoadFromMemoryToo(Catalog* memory) { loads_.LoadFromMemoryToo(memory); }

 private:
  storage::Backend& backend_;
  Catalog catalog_;       // first: the parts hold it
  HostRanks host_ranks_;  // the parts hold it too
  SaveGathering saves_;
  Committer committer_;
  LoadGathering loads_;
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_COORDINATOR_H_
