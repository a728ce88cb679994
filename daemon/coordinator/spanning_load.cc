// Coordinator: loads whose world spans hosts (coordinator.h
// PlanSpanningLoad). Each host's plan waits here until every rank of the
// job arrived; the last arrival plans them all at once (load_planner.h)
// and cuts the plan into the hosts' parts (load_spread.h).
#include <algorithm>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/coordinator/tier_choice.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/load_spread.h"
#include "daemon/planning/replica_placement.h"
#include "daemon/storage/layout.h"
#include "proto/lib/secure_random.h"
#include "proto/lib/validation.h"

namespace ckpt::coordinator {

struct Coordinator::ActiveLoad {
  std::string job;
  int64_t step = 0;  // as asked: -1 is the latest, resolved once for all hosts
  int world_size = 0;
  absl::Time deadline;
  std::vector<v1::NodeLoadPlan> nodes;
  std::map<int, std::string> rank_hosts;
  uint64_t group_bytes = ~uint64_t{0};
  bool planned = false;
  absl::Status error;
  std::map<std::string, v1::LoadAssignment> parts;  // by host, taken as answered
};

size_t Coordinator::loads_gathering() const {
  absl::MutexLock lock(&mu_);
  return loads_.size();
}

void Coordinator::FailLoadsOfLocked(const std::string& host, const absl::Status& why) {
  for (auto it = loads_.begin(); it != loads_.end();) {
    ActiveLoad& load = *it->second;
    const bool member =
        std::any_of(load.nodes.begin(), load.nodes.end(),
                    [&](const v1::NodeLoadPlan& n) { return n.host().host() == host; });
    if (member && load.error.ok()) {
      load.error = why;
      it = loads_.erase(it);  // the next load of this step gathers afresh
    } else {
      ++it;
    }
  }
}

absl::StatusOr<v1::LoadAssignment> Coordinator::PlanSpanningLoad(const v1::NodeLoadPlan& node,
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
      auto fresh = std::make_shared<ActiveLoad>();
      fresh->job = node.job();
      fresh->step = node.step();
      fresh->world_size = node.world_size();
      fresh->deadline = absl::Now() + rendezvous_.plan_timeout;
      it = loads_.emplace(key, std::move(fresh)).first;
    }
    load = it->second;
    // A bad plan fails the load for every host: they would otherwise wait
    // for ranks that never come.
    absl::Status bad;
    if (node.world_size() != load->world_size) {
      bad = absl::InvalidArgumentError(absl::StrCat("host ", host, " says the world has ",
                                                    node.world_size(), " ranks, another host said ",
                                                    load->world_size));
    }
    for (const v1::NodeLoadPlan& other : load->nodes) {
      if (bad.ok() && other.host().host() == host) {
        bad = absl::FailedPreconditionError(
            absl::StrCat("host ", host, " sent its plan for this load twice"));
      }
    }
    std::vector<int> added;
    for (int i = 0; bad.ok() && i < node.ranks_size(); ++i) {
      const int rank = node.ranks(i).rank();
      if (rank < 0 || rank >= load->world_size) {
        bad = absl::InvalidArgumentError(
            absl::StrCat("host ", host, " sent rank ", rank, " of a world of ", load->world_size));
      } else if (auto r = load->rank_hosts.find(rank); r != load->rank_hosts.end()) {
        bad = absl::InvalidArgumentError(absl::StrCat("rank ", rank, " asked to load on both host ",
                                                      r->second, " and host ", host));
      } else {
        load->rank_hosts.emplace(rank, host);
      }
    }
    if (!bad.ok()) {
      load->error = bad;
      loads_.erase(it);
      return bad;
    }
    load->nodes.push_back(node);
    if (node.group_bytes() > 0) load->group_bytes = std::min(load->group_bytes, node.group_bytes());
    plan_it = load->rank_hosts.size() == static_cast<size_t>(load->world_size);
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
    const bool present = AwaitSave(
        [&] {
          timed_out = absl::Now() >= load->deadline;
          return load->planned || !load->error.ok() || timed_out;
        },
        gone);
    if (load->error.ok() && !load->planned) {
      if (!present) {
        load->error = absl::AbortedError(
            absl::StrCat("host ", host, " gave up waiting for the other hosts' load plans"));
      } else {
        std::vector<int> missing;
        for (int r = 0; r < load->world_size && missing.size() < 16; ++r) {
          if (load->rank_hosts.count(r) == 0) missing.push_back(r);
        }
        const size_t absent = load->world_size - load->rank_hosts.size();
        load->error = absl::DeadlineExceededError(absl::StrCat(
            "ranks [", absl::StrJoin(missing, ", "), absent > 16 ? ", ..." : "", "] (", absent,
            " of ", load->world_size, ") never reached the coordinator within ",
            absl::FormatDuration(rendezvous_.plan_timeout), ": their hosts did not send plans"));
      }
      auto it = loads_.find({load->job, load->step});
      if (it != loads_.end() && it->second == load) loads_.erase(it);
    }
  }
  absl::MutexLock lock(&mu_);
  if (!load->error.ok()) return load->error;
  auto part = load->parts.find(host);
  if (part == load->parts.end()) {
    return absl::InternalError(absl::StrCat("the load's plan has no part for host ", host));
  }
  v1::LoadAssignment mine = std::move(part->second);
  load->parts.erase(part);
  return mine;
}

namespace {

// Every data file a load needs, once.
std::set<std::string> NeededFiles(const v1::LoadAssignment& global) {
  std::set<std::string> files;
  for (const v1::ChunkRead& read : global.reads()) files.insert(read.chunk().file());
  for (const v1::ObjectRead& read : global.objects()) files.insert(read.chunk().file());
  return files;
}

}  // namespace

absl::StatusOr<std::shared_ptr<v1::LoadAssignment>> Coordinator::PlanFromMemory(
    const ActiveLoad& load, planning::FileHolders* holders) {
  const v1::LoadTier tier = load.nodes.front().tier();
  absl::StatusOr<std::optional<int64_t>> chosen =
      MemoryStepToLoad(catalog_, memory_catalog_, load.job, load.step, tier, "the coordinator");
  if (!chosen.ok()) return chosen.status();
  if (!chosen->has_value()) return nullptr;  // from storage
  const int64_t step = **chosen;
  absl::StatusOr<v1::CheckpointManifest> manifest = memory_catalog_->ReadManifest(load.job, step);
  if (!manifest.ok()) {
    if (tier == v1::LOAD_TIER_ANY) return nullptr;
    return manifest.status();
  }
  absl::StatusOr<std::shared_ptr<v1::LoadAssignment>> global =
      planning::PlanLoadShared(*manifest, load.nodes, options_.limits);
  if (!global.ok()) return global.status();
  holders->clear();
  for (const v1::NodeLoadPlan& node : load.nodes) {
    for (const v1::NodeLoadPlan::HeldStep& held : node.memory_steps()) {
      if (held.step() != step) continue;
      for (const std::string& file : held.files()) (*holders)[file].insert(node.host().host());
    }
  }
  // Files no host holds any more: rebuilt from parity when the step was
  // erasure coded.
  bool missing = false;
  for (const std::string& file : NeededFiles(**global))
    missing = missing || holders->count(file) == 0;
  if (missing) {
    absl::StatusOr<std::string> layout = memory_catalog_->ReadStepFile(
        load.job, step, kErasureFile, memory_catalog_->limits().max_manifest_bytes);
    v1::ErasurePlan stripes;
    if (layout.ok() && stripes.ParseFromString(*layout)) {
      std::set<std::string> load_hosts;
      for (const v1::NodeLoadPlan& node : load.nodes) load_hosts.insert(node.host().host());
      absl::StatusOr<v1::ErasureRebuild> rebuild =
          planning::PlanRebuild(stripes, load_hosts, *holders);
      if (!rebuild.ok()) {
        if (tier == v1::LOAD_TIER_ANY) return nullptr;
        return absl::Status(rebuild.status().code(),
                            absl::StrCat("step ", step, " of job ", load.job,
                                         " in the memory tier: ", rebuild.status().message()));
      }
      uint64_t rebuild_id = 0;
      FillRandom(&rebuild_id, sizeof rebuild_id);
      std::string secret(16, '\0');
      FillRandom(secret.data(), secret.size());
      rebuild->set_rebuild_id(rebuild_id);
      rebuild->set_secret(secret);
      rebuild->set_manifest(manifest->SerializeAsString());
      *(*global)->mutable_rebuild() = std::move(*rebuild);
    }
  }
  for (const std::string& file : NeededFiles(**global)) {
    if (holders->count(file) > 0) continue;
    if (tier == v1::LOAD_TIER_ANY) return nullptr;
    return absl::UnavailableError(absl::StrCat(
        "step ", step, " of job ", load.job, " is in the memory tier, but no host of this load ",
        "holds its file ", file, " any more (the host that wrote it and its replicas lost their ",
        "memory): load it from storage"));
  }
  (*global)->set_checkpoint_path(
      storage::StepDir(memory_catalog_->root(), load.job, manifest->step()));
  (*global)->set_from_memory(true);
  return global;
}

absl::Status Coordinator::PlanGatheredLoad(ActiveLoad& load) {
  for (const v1::NodeLoadPlan& node : load.nodes) {
    if (node.tier() != load.nodes.front().tier()) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", node.host().host(), " asks for another tier than host ",
                       load.nodes.front().host().host(), " for one load"));
    }
  }
  planning::FileHolders holders;
  absl::StatusOr<std::shared_ptr<v1::LoadAssignment>> global = PlanFromMemory(load, &holders);
  if (!global.ok()) return global.status();
  if (*global == nullptr) {
    // "latest" is resolved once, so that every host loads the same step.
    absl::StatusOr<v1::CheckpointManifest> manifest = catalog_.ReadManifest(load.job, load.step);
    if (!manifest.ok()) return manifest.status();
    // On an arena: the whole job's plan, split among the hosts below.
    global = planning::PlanLoadShared(*manifest, load.nodes, options_.limits);
    if (!global.ok()) return global.status();
    (*global)->set_checkpoint_path(storage::StepDir(root(), load.job, manifest->step()));
  }
  const bool from_memory = (*global)->from_memory();
  std::map<std::string, std::string> addresses;
  bool every_host_has_a_channel = true;
  for (const v1::NodeLoadPlan& node : load.nodes) {
    addresses[node.host().host()] = node.host().address();
    every_host_has_a_channel = every_host_has_a_channel && !node.host().address().empty();
  }
  uint64_t load_id = 0;
  FillRandom(&load_id, sizeof load_id);
  std::string secret(16, '\0');
  FillRandom(secret.data(), secret.size());
  planning::LoadSpread spread =
      planning::SpreadLoad(**global, load.rank_hosts, addresses,
                           load.group_bytes == ~uint64_t{0} ? (64u << 20) : load.group_bytes,
                           load_id, secret, from_memory ? &holders : nullptr);
  for (auto& [host, part] : spread.parts) {
    part.set_from_memory(from_memory);
    // Each host's rebuilds: those it runs, and those it sends shares to.
    const v1::ErasureRebuild& all = (*global)->rebuild();
    if (all.stripes().empty()) continue;
    v1::ErasureRebuild& mine = *part.mutable_rebuild();
    mine = all;
    mine.clear_stripes();
    for (const v1::StripeRebuild& sr : all.stripes()) {
      bool takes_part = sr.rebuilder() == host;
      for (uint32_t i : sr.sources())
        takes_part = takes_part || sr.stripe().shares(i).host() == host;
      if (!takes_part) continue;
      v1::StripeRebuild& copy = *mine.add_stripes();
      copy = sr;
      copy.set_rebuilder_address(addresses[sr.rebuilder()]);
    }
    if (mine.stripes().empty()) part.clear_rebuild();
  }
  if (from_memory && !every_host_has_a_channel) {
    return absl::FailedPreconditionError(
        "a load from the memory tier spread over hosts needs every host's peer data channel "
        "(--peer_address)");
  }
  if (!every_host_has_a_channel) {
    // No way to forward: each host reads all it needs itself (a chunk two
    // hosts need is then read twice).
    for (auto& [host, part] : spread.parts) {
      part.clear_peers();
      for (v1::ChunkRead& read : *part.mutable_reads()) read.clear_route();
      for (v1::ObjectRead& read : *part.mutable_objects()) read.clear_route();
    }
  }
  absl::MutexLock lock(&mu_);
  load.parts = std::move(spread.parts);
  return absl::OkStatus();
}

}  // namespace ckpt::coordinator
