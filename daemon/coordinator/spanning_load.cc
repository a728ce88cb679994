// LoadGathering (load_gathering.h): the plan of a load whose world spans
// hosts, once every rank of the job arrived. The last arrival plans them
// all at once (load_planner.h), from the memory tier when it may and can,
// else from storage, and cuts the plan into the hosts' parts
// (load_spread.h).
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/load_gathering.h"
#include "daemon/coordinator/partial_dir.h"
#include "daemon/coordinator/tier_choice.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/load_spread.h"
#include "daemon/planning/replica_placement.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/step_location.h"
#include "proto/lib/secure_random.h"

namespace ckpt::coordinator {

namespace {

// Every data file a load needs, once.
std::set<std::string> NeededFiles(const planning::GlobalLoad& global) {
  std::set<std::string> files;
  for (absl::string_view file : global.files()) files.emplace(file);
  for (const v1::ObjectRead& read : global.header().objects()) files.insert(read.chunk().file());
  return files;
}

}  // namespace

absl::StatusOr<std::shared_ptr<planning::GlobalLoad>> LoadGathering::PlanFromMemory(
    const ActiveLoad& load, planning::FileHolders* holders,
    std::optional<planning::PlanBudget::Reservation>* reserved) {
  const v1::LoadTier tier = load.nodes.front().tier();
  absl::StatusOr<std::optional<int64_t>> chosen =
      MemoryStepToLoad(catalog_, memory_catalog_, load.job, load.step, tier, "the coordinator");
  if (!chosen.ok()) return chosen.status();
  if (!chosen->has_value()) return nullptr;  // from storage
  const int64_t step = **chosen;
  absl::StatusOr<v1::CheckpointManifest> read = memory_catalog_->ReadManifest(load.job, step);
  if (!read.ok()) {
    if (tier == v1::LOAD_TIER_ANY) return nullptr;
    return read.status();
  }
  // Kept for a rebuild, which sends it to the rebuilders.
  auto manifest = std::make_shared<const v1::CheckpointManifest>(std::move(*read));
  absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> columns =
      planning::ColumnManifest::FromManifest(*manifest);
  if (!columns.ok()) return columns.status();
  absl::StatusOr<std::optional<planning::PlanBudget::Reservation>> reservation =
      ReservePlanning(load.nodes, **columns, load.job, step);
  if (!reservation.ok()) return reservation.status();
  *reserved = *std::move(reservation);
  absl::StatusOr<std::shared_ptr<planning::GlobalLoad>> global =
      planning::PlanGlobalLoad(*std::move(columns), load.nodes, options_.limits, options_.threads);
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
      *(*global)->header().mutable_rebuild() = std::move(*rebuild);
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
  (*global)->header().set_checkpoint_path(
      storage::StepDir(memory_catalog_->root(), load.job, manifest->step()));
  (*global)->header().set_from_memory(true);
  return global;
}

absl::Status LoadGathering::PlanGatheredLoad(ActiveLoad& load) {
  for (const v1::NodeLoadPlan& node : load.nodes) {
    if (node.tier() != load.nodes.front().tier()) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", node.host().host(), " asks for another tier than host ",
                       load.nodes.front().host().host(), " for one load"));
    }
  }
  planning::FileHolders holders;
  // The plan's and the spread's scratch, within the coordinator's planning
  // memory, until both are made.
  std::optional<planning::PlanBudget::Reservation> reserved;
  absl::StatusOr<std::shared_ptr<planning::GlobalLoad>> global =
      PlanFromMemory(load, &holders, &reserved);
  if (!global.ok()) return global.status();
  if (*global == nullptr) {
    // "latest" is resolved once, so that every host loads the same step.
    // In columns (column_manifest.h): a cluster's manifest joined is a
    // message per chunk, gigabytes.
    absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> read =
        catalog_.ReadLoadManifest(load.job, load.step);
    if (!read.ok()) return read.status();
    const int64_t step = (*read)->header().step();
    absl::StatusOr<std::optional<planning::PlanBudget::Reservation>> reservation =
        ReservePlanning(load.nodes, **read, load.job, step);
    if (!reservation.ok()) return reservation.status();
    reserved = *std::move(reservation);
    // The whole job's plan, split among the hosts below; it keeps the
    // manifest, which it points into.
    global =
        planning::PlanGlobalLoad(*std::move(read), load.nodes, options_.limits, options_.threads);
    if (!global.ok()) return global.status();
    absl::StatusOr<std::string> dir = storage::ResolveStepDir(backend_, root(), load.job, step);
    if (!dir.ok()) return dir.status();
    (*global)->header().set_checkpoint_path(*dir);
  }
  const bool from_memory = (*global)->header().from_memory();
  std::map<std::string, std::string> addresses;
  bool every_host_has_a_channel = true;
  for (const v1::NodeLoadPlan& node : load.nodes) {
    addresses[node.host().host()] = node.host().address();
    every_host_has_a_channel = every_host_has_a_channel && !node.host().address().empty();
  }
  if (from_memory && !every_host_has_a_channel) {
    return absl::FailedPreconditionError(
        "a load from the memory tier spread over hosts needs every host's peer data channel "
        "(--peer_address)");
  }
  uint64_t load_id = 0;
  FillRandom(&load_id, sizeof load_id);
  std::string secret(16, '\0');
  FillRandom(secret.data(), secret.size());
  // The barrier keeps which ranks came; the plans say from where.
  std::map<int, std::string> rank_hosts;
  for (const v1::NodeLoadPlan& node : load.nodes) {
    for (const auto& r : node.ranks()) rank_hosts.emplace(r.rank(), node.host().host());
  }
  auto planned = std::make_shared<PlannedLoad>(PlannedLoad{
      planning::LoadSpread(*global, rank_hosts, addresses,
                           load.group_bytes == ~uint64_t{0} ? (64u << 20) : load.group_bytes,
                           load_id, secret, from_memory ? &holders : nullptr, options_.threads),
      std::move(addresses),
      {},
      from_memory,
      every_host_has_a_channel});
  for (const planning::LostShare& lost : planning::LostShares((*global)->header().rebuild())) {
    for (const std::string& file : lost.files) planned->rebuilt_files[file] = lost.rebuilder;
  }
  const std::vector<std::string>& hosts = planned->spread.hosts();
  absl::MutexLock lock(&mu_);
  load.parts_left = std::set<std::string>(hosts.begin(), hosts.end());
  load.plan = std::move(planned);
  return absl::OkStatus();
}

absl::StatusOr<v1::LoadAssignment> LoadGathering::PartOf(const PlannedLoad& planned,
                                                         const std::string& host) {
  std::optional<v1::LoadAssignment> made = planned.spread.Part(host);
  if (!made.has_value()) {
    return absl::InternalError(absl::StrCat("the load's plan has no part for host ", host));
  }
  v1::LoadAssignment& part = *made;
  part.set_from_memory(planned.from_memory);
  part.mutable_rebuilt_files()->insert(planned.rebuilt_files.begin(), planned.rebuilt_files.end());
  // Its rebuilds: those it runs, and those it sends shares to.
  const v1::ErasureRebuild& all = planned.spread.global().header().rebuild();
  if (!all.stripes().empty()) {
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
      auto address = planned.addresses.find(sr.rebuilder());
      copy.set_rebuilder_address(address == planned.addresses.end() ? "" : address->second);
    }
    if (mine.stripes().empty()) part.clear_rebuild();
  }
  if (!planned.peer_channels) {
    // No way to forward: each host reads all it needs itself (a chunk two
    // hosts need is then read twice).
    part.clear_peers();
    for (v1::ChunkRead& read : *part.mutable_reads()) read.clear_route();
    for (v1::ObjectRead& read : *part.mutable_objects()) read.clear_route();
  }
  return std::move(part);
}

}  // namespace ckpt::coordinator
