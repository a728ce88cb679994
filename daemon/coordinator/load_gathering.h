// The coordinator's loads (coordinator.h PlanLoad, PlanSpanningLoad): a
// host's load of its own ranks, planned at once (the step pinned first
// when asked), and a load whose world spans hosts, whose hosts' plans are
// gathered here until every rank of the job arrived (planning::RankBarrier),
// then planned once, from the memory tier or from storage, and cut into the
// hosts' parts (spanning_load.cc). Hosts lost to the registry load nothing
// until they register again, and fail the loads they take part in.
//
// Thread-safety: all methods are safe from any thread. mu_ guards the
// loads gathering and the lost hosts; it is never held while planning,
// reading storage or calling into another part of the coordinator. A
// load's plans are written only while it gathers and read by its one
// planner after. LoadFromMemoryToo is called once, before serving.
#ifndef CKPT_DAEMON_COORDINATOR_LOAD_GATHERING_H_
#define CKPT_DAEMON_COORDINATOR_LOAD_GATHERING_H_

#include <cstdint>
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
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/host_ranks.h"
#include "daemon/coordinator/rendezvous.h"
#include "daemon/planning/global_load.h"
#include "daemon/planning/load_spread.h"
#include "daemon/planning/rank_barrier.h"
#include "daemon/planning/save_planner.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

class LoadGathering {
 public:
  LoadGathering(storage::Backend& backend, Catalog& catalog, HostRanks& host_ranks,
                planning::SavePlannerOptions options, RendezvousOptions rendezvous);

  // Coordinator::PlanLoad, PlanSpanningLoad, loads_gathering,
  // LoadFromMemoryToo.
  absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::NodeLoadPlan& node,
                                              std::unique_ptr<storage::FileLock>* pin);
  absl::StatusOr<v1::LoadAssignment> PlanSpanningLoad(const v1::NodeLoadPlan& node,
                                                      const CallerGone& gone);
  size_t loads_gathering() const;
  void LoadFromMemoryToo(Catalog* memory) { memory_catalog_ = memory; }

  // The registry lost `host`: the spanning loads it takes part in (its
  // plan came, or it carried ranks of their job) fail, naming it, and it
  // joins none until HostRegistered.
  void HostLost(const std::string& host, const std::string& reason);
  // Every load gathering fails with `error` (this coordinator stopped
  // leading: docs/failover.md); the next load of a step gathers afresh.
  void AbortAll(const absl::Status& error);
  void HostRegistered(const std::string& host);
  // Fails the gathering spanning loads that waited past the lost-ranks
  // grace (rendezvous.h) for ranks a lost host carried, naming it.
  void ExpireLoads(absl::Time now);

 private:
  // A spanning load's plan: who reads what (load_spread.h) and what every
  // host's part carries besides. Not changed once made.
  struct PlannedLoad {
    planning::LoadSpread spread;
    std::map<std::string, std::string> addresses;      // by host, its peer data channel
    std::map<std::string, std::string> rebuilt_files;  // file -> its rebuilder
    bool from_memory = false;
    bool peer_channels = true;  // every host has a peer data channel
  };
  // A spanning load between its first host's plan and its plan (or
  // failure). Its fields are guarded by mu_, but for the plans, written
  // only while it gathers and read by its one planner after.
  struct ActiveLoad {
    ActiveLoad(int world_size, absl::Time now, absl::Time deadline)
        : ranks(world_size, world_size, deadline), started(now) {}
    std::string job;
    int64_t step = 0;             // as asked: -1 is the latest, resolved once for all hosts
    planning::RankBarrier ranks;  // every rank of the world, once
    absl::Time started;           // its first host's plan
    std::vector<v1::NodeLoadPlan> nodes;
    uint64_t group_bytes = ~uint64_t{0};
    bool planned = false;
    absl::Status error;
    // Once planned: what each host's part is made from as it asks for it,
    // dropped when the last host has taken its part.
    std::shared_ptr<const PlannedLoad> plan;
    std::set<std::string> parts_left;  // the hosts that did not take theirs yet
  };

  const std::string& root() const { return catalog_.root(); }
  // Plans a spanning load whose hosts all arrived; without mu_ but to
  // hand the parts over.
  absl::Status PlanGatheredLoad(ActiveLoad& load) ABSL_LOCKS_EXCLUDED(mu_);
  // The planning memory a load of `manifest` for `nodes` needs
  // (plan_budget.h), reserved, waiting up to the plan timeout; nullopt
  // without a budget.
  absl::StatusOr<std::optional<planning::PlanBudget::Reservation>> ReservePlanning(
      absl::Span<const v1::NodeLoadPlan> nodes, const planning::ColumnManifest& manifest,
      const std::string& job, int64_t step);
  // The whole load's plan from the memory tier when it may and can come
  // from there (every file it needs held by a host of the load, *holders
  // says which); null when it comes from storage.
  // Its planning memory is reserved in *reserved.
  absl::StatusOr<std::shared_ptr<planning::GlobalLoad>> PlanFromMemory(
      const ActiveLoad& load, planning::FileHolders* holders,
      std::optional<planning::PlanBudget::Reservation>* reserved);
  // `host`'s part of a planned load, made now (its reads, rebuilds, routes).
  static absl::StatusOr<v1::LoadAssignment> PartOf(const PlannedLoad& planned,
                                                   const std::string& host);
  // The host that sent `rank` for `load` (this host when none before it).
  static std::string RankHost(const ActiveLoad& load, int rank, const std::string& host);
  // Fails the gathering spanning loads `host` takes part in.
  void FailLoadsOfLocked(const std::string& host, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  storage::Backend& backend_;
  Catalog& catalog_;
  HostRanks& host_ranks_;  // locks itself (a leaf)
  const planning::SavePlannerOptions options_;
  const RendezvousOptions rendezvous_;
  Catalog* memory_catalog_ = nullptr;  // set before serving
  mutable absl::Mutex mu_;
  // Spanning loads gathering plans, by job and step asked for.
  std::map<std::pair<std::string, int64_t>, std::shared_ptr<ActiveLoad>> loads_
      ABSL_GUARDED_BY(mu_);
  std::set<std::string> lost_hosts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_LOAD_GATHERING_H_
