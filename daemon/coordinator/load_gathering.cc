#include "daemon/coordinator/load_gathering.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/retention.h"
#include "daemon/planning/load_planner.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/step_location.h"
#include "proto/lib/status_context.h"
#include "proto/lib/validation.h"

namespace ckpt::coordinator {

LoadGathering::LoadGathering(storage::Backend& backend, Catalog& catalog, HostRanks& host_ranks,
                             planning::SavePlannerOptions options, RendezvousOptions rendezvous)
    : backend_(backend),
      catalog_(catalog),
      host_ranks_(host_ranks),
      options_(options),
      rendezvous_(rendezvous) {}

absl::StatusOr<v1::LoadAssignment> LoadGathering::PlanLoad(
    const v1::NodeLoadPlan& node, std::unique_ptr<storage::FileLock>* pin) {
  // Pinned before the manifest is read. "latest" may move on between the
  // pin and the read (a commit): then the pin is taken again.
  constexpr int kPinAttempts = 3;
  // In columns (column_manifest.h), as a load plans from it.
  absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> manifest;
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<storage::FileLock> held;
    int64_t pinned_step = -1;
    bool unpinnable = false;
    if (pin != nullptr) {
      absl::StatusOr<int64_t> step = catalog_.ResolveStep(node.job(), node.step());
      if (!step.ok()) return step.status();
      absl::StatusOr<std::unique_ptr<storage::FileLock>> pinned =
          PinStep(backend_, root(), node.job(), *step);
      if (pinned.ok()) {
        held = std::move(*pinned);
        pinned_step = *step;
      } else if (!absl::IsNotFound(pinned.status())) {
        // Locks do not work here (a filesystem without flock): gc cannot
        // lock the step either, so it keeps it; load unpinned.
        unpinnable = true;
        std::fprintf(stderr, "ckptd: load of job %s step %lld goes on unpinned: %s\n",
                     node.job().c_str(), static_cast<long long>(*step),
                     std::string(pinned.status().message()).c_str());
      }
      // NOT_FOUND: deleted meanwhile, or no MANIFEST; the read says which.
    }
    manifest = catalog_.ReadLoadManifest(node.job(), node.step());
    if (!manifest.ok()) return manifest.status();
    if (pin == nullptr || unpinnable) break;
    if (held != nullptr && (*manifest)->header().step() == pinned_step) {
      *pin = std::move(held);
      break;
    }
    if (attempt >= kPinAttempts) {
      return absl::AbortedError(absl::StrCat("the latest step of job ", node.job(), " changed ",
                                             kPinAttempts,
                                             " times while the load pinned it; try again"));
    }
  }
  const int64_t step = (*manifest)->header().step();
  absl::StatusOr<std::optional<planning::PlanBudget::Reservation>> reserved =
      ReservePlanning({node}, **manifest, node.job(), step);
  if (!reserved.ok()) return reserved.status();
  absl::StatusOr<std::shared_ptr<planning::GlobalLoad>> global =
      planning::PlanGlobalLoad(*std::move(manifest), {node}, options_.limits, options_.threads);
  if (!global.ok()) return global.status();
  v1::LoadAssignment assignment;
  (*global)->ToAssignment(assignment);
  absl::StatusOr<std::string> dir = storage::ResolveStepDir(backend_, root(), node.job(), step);
  if (!dir.ok()) return dir.status();
  assignment.set_checkpoint_path(*dir);
  return assignment;
}

absl::StatusOr<std::optional<planning::PlanBudget::Reservation>> LoadGathering::ReservePlanning(
    absl::Span<const v1::NodeLoadPlan> nodes, const planning::ColumnManifest& manifest,
    const std::string& job, int64_t step) {
  if (rendezvous_.plan_budget == nullptr) return std::nullopt;
  absl::StatusOr<planning::PlanBudget::Reservation> reserved = rendezvous_.plan_budget->Reserve(
      planning::LoadScratchBytes(nodes, manifest),
      absl::StrCat("the load plan of job ", job, " step ", step, " (", nodes.size(), " hosts)"),
      rendezvous_.plan_timeout);
  if (!reserved.ok()) return reserved.status();
  return std::optional<planning::PlanBudget::Reservation>(*std::move(reserved));
}

size_t LoadGathering::loads_gathering() const {
  absl::MutexLock lock(&mu_);
  return loads_.size();
}

void LoadGathering::FailLoadsOfLocked(const std::string& host, const std::string& reason) {
  for (auto it = loads_.begin(); it != loads_.end();) {
    ActiveLoad& load = *it->second;
    const int world_size = load.ranks.world_size();
    std::vector<int> ranks = host_ranks_.RanksOf(host, load.job, world_size);
    auto member = std::find_if(load.nodes.begin(), load.nodes.end(),
                               [&](const v1::NodeLoadPlan& n) { return n.host().host() == host; });
    if (member != load.nodes.end()) {
      ranks.clear();
      for (const auto& r : member->ranks()) ranks.push_back(r.rank());
    }
    if ((member != load.nodes.end() || !ranks.empty()) && load.error.ok()) {
      load.error = HostRanks::LostError(host, ranks, world_size, reason);
      it = loads_.erase(it);  // the next load of this step gathers afresh
    } else {
      ++it;
    }
  }
}

std::string LoadGathering::RankHost(const ActiveLoad& load, int rank, const std::string& host) {
  // Only on the error path: the barrier keeps ranks, not their hosts.
  for (const v1::NodeLoadPlan& node : load.nodes) {
    for (const auto& r : node.ranks()) {
      if (r.rank() == rank) return node.host().host();
    }
  }
  return host;  // twice in this host's own plan
}

void LoadGathering::ExpireLoads(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto it = loads_.begin(); it != loads_.end();) {
    ActiveLoad& load = *it->second;
    if (!load.error.ok() || now - load.started < rendezvous_.lost_ranks_grace) {
      ++it;
      continue;
    }
    std::vector<int> arrived;
    for (const v1::NodeLoadPlan& node : load.nodes) {
      for (const auto& r : node.ranks()) arrived.push_back(r.rank());
    }
    const int world_size = load.ranks.world_size();
    std::optional<HostRanks::LostCarrier> lost =
        host_ranks_.LostFrom(load.job, world_size, arrived);
    if (!lost.has_value()) {
      ++it;
      continue;
    }
    // Its hosts wake (mu_ released) and fail with this.
    load.error = HostRanks::LostError(lost->host, lost->ranks, world_size, lost->reason);
    it = loads_.erase(it);  // the next load of this step gathers afresh
  }
}

void LoadGathering::HostLost(const std::string& host, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  lost_hosts_.insert(host);
  FailLoadsOfLocked(host, reason);
}

void LoadGathering::AbortAll(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  for (auto& [key, load] : loads_) {
    if (load->error.ok()) load->error = error;
  }
  loads_.clear();
}

void LoadGathering::HostRegistered(const std::string& host) {
  absl::MutexLock lock(&mu_);
  lost_hosts_.erase(host);
}

absl::StatusOr<v1::LoadAssignment> LoadGathering::PlanSpanningLoad(const v1::NodeLoadPlan& node,
                                                                   const CallerGone& gone) {
  if (absl::Status s = ValidateName("job", node.job()); !s.ok()) return s;
  const std::string& host = node.host().host();
  if (absl::Status s = ValidateName("host", host); !s.ok()) return s;
  if (node.world_size() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("host ", host, " sent world size ", node.world_size()));
  }
  if (node.world_size() > options_.limits.max_world_size) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "host ", host, " says the world has ", node.world_size(), " ranks; the limit is ",
        options_.limits.max_world_size, " (--max_world_size)"));
  }
  if (!v1::LoadTier_IsValid(node.tier())) {
    return absl::InvalidArgumentError(
        absl::StrCat("host ", host, " asks for load tier ", static_cast<int>(node.tier())));
  }
  // What a host holds of a job in memory: a few steps of a few files each.
  constexpr int kMaxHeldSteps = 1024;
  constexpr int kMaxHeldFiles = 1 << 16;
  constexpr size_t kMaxFileName = 4096;
  int held_files = 0;
  bool held_ok = node.memory_steps_size() <= kMaxHeldSteps;
  for (const v1::NodeLoadPlan::HeldStep& held : node.memory_steps()) {
    held_files += held.files_size();
    for (const std::string& file : held.files()) held_ok = held_ok && file.size() <= kMaxFileName;
  }
  if (!held_ok || held_files > kMaxHeldFiles) {
    return absl::InvalidArgumentError(
        absl::StrCat("host ", host, " says it holds ", node.memory_steps_size(), " steps and ",
                     held_files, " files of the job in memory (at most ", kMaxHeldSteps, " and ",
                     kMaxHeldFiles, ", names of at most ", kMaxFileName, " bytes)"));
  }
  if (node.ranks_size() == 0 || node.ranks_size() > node.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("host ", host, " sent ", node.ranks_size(),
                                                   " ranks of a world of ", node.world_size()));
  }
  std::shared_ptr<ActiveLoad> load;
  bool plan_it = false;
  {
    absl::MutexLock lock(&mu_);
    if (lost_hosts_.count(host) > 0) {
      return absl::UnavailableError(
          absl::StrCat("host ", host,
                       " was lost to the coordinator; it loads nothing until it registers again"));
    }
    const std::pair<std::string, int64_t> key(node.job(), node.step());
    auto it = loads_.find(key);
    if (it == loads_.end()) {
      if (loads_.size() >= rendezvous_.max_active_saves) {
        return absl::ResourceExhaustedError(absl::StrCat(
            loads_.size(), " loads spanning hosts are gathering at the coordinator; the limit is ",
            rendezvous_.max_active_saves));
      }
      const absl::Time now = absl::Now();
      auto fresh =
          std::make_shared<ActiveLoad>(node.world_size(), now, now + rendezvous_.plan_timeout);
      fresh->job = node.job();
      fresh->step = node.step();
      it = loads_.emplace(key, std::move(fresh)).first;
    }
    load = it->second;
    // A bad plan fails the load for every host: they would otherwise wait
    // for ranks that never come.
    absl::Status bad;
    if (node.world_size() != load->ranks.world_size()) {
      bad = absl::InvalidArgumentError(absl::StrCat("host ", host, " says the world has ",
                                                    node.world_size(), " ranks, another host said ",
                                                    load->ranks.world_size()));
    }
    for (const v1::NodeLoadPlan& other : load->nodes) {
      if (bad.ok() && other.host().host() == host) {
        bad = absl::FailedPreconditionError(
            absl::StrCat("host ", host, " sent its plan for this load twice"));
      }
    }
    for (int i = 0; bad.ok() && i < node.ranks_size(); ++i) {
      const int rank = node.ranks(i).rank();
      const absl::StatusOr<bool> arrived = load->ranks.Arrive(rank);
      if (absl::IsInvalidArgument(arrived.status())) {
        bad = absl::InvalidArgumentError(absl::StrCat("host ", host, " sent rank ", rank,
                                                      " of a world of ", load->ranks.world_size()));
      } else if (absl::IsAlreadyExists(arrived.status())) {
        bad = absl::InvalidArgumentError(absl::StrCat("rank ", rank, " asked to load on both host ",
                                                      RankHost(*load, rank, host), " and host ",
                                                      host));
      } else if (!arrived.ok()) {
        bad = WithContext(arrived.status(), absl::StrCat("host ", host));
      }
    }
    if (!bad.ok()) {
      load->error = bad;
      loads_.erase(it);
      return bad;
    }
    load->nodes.push_back(node);
    if (node.group_bytes() > 0) load->group_bytes = std::min(load->group_bytes, node.group_bytes());
    plan_it = load->ranks.complete();
    // Every host is here: the next load of this step gathers afresh.
    if (plan_it) loads_.erase(it);
  }
  if (plan_it) {
    const absl::Status planned = PlanGatheredLoad(*load);
    absl::MutexLock lock(&mu_);
    if (load->error.ok()) load->error = planned;
    load->planned = true;
  } else {
    absl::MutexLock lock(&mu_);
    bool timed_out = false;
    const bool present = AwaitUnlessGone(
        mu_,
        [&] {
          // Not ranks.Expired: the deadline also ends a wait while the
          // last host plans.
          timed_out = absl::Now() >= load->ranks.deadline();
          return load->planned || !load->error.ok() || timed_out;
        },
        gone);
    if (load->error.ok() && !load->planned) {
      if (!present) {
        load->error = absl::AbortedError(
            absl::StrCat("host ", host, " gave up waiting for the other hosts' load plans"));
      } else {
        load->error = RanksNeverCame(load->ranks, rendezvous_.plan_timeout);
      }
      auto it = loads_.find({load->job, load->step});
      if (it != loads_.end() && it->second == load) loads_.erase(it);
    }
  }
  std::shared_ptr<const PlannedLoad> plan;
  {
    absl::MutexLock lock(&mu_);
    if (!load->error.ok()) return load->error;
    if (load->parts_left.erase(host) == 0 || load->plan == nullptr) {
      return absl::InternalError(absl::StrCat("the load's plan has no part for host ", host));
    }
    plan = load->plan;
    // The last host's: the global plan goes once its part is made.
    if (load->parts_left.empty()) load->plan.reset();
  }
  // Made without the lock, by each host's call at once: the parts of a
  // cluster's load are many times its global plan.
  return PartOf(*plan, host);
}

}  // namespace ckpt::coordinator
