#include "daemon/planning/plan_cache.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/planning/plan_budget.h"
#include "daemon/planning/planned_manifest.h"

namespace ckpt::planning {

v1::CheckpointManifest SavePlan::Manifest() const {
  v1::CheckpointManifest manifest = ManifestOf(*assignment);
  manifest.set_step(step);
  *manifest.mutable_user_metadata() = user_metadata;
  return manifest;
}

v1::CheckpointManifest SavePlan::Header() const {
  v1::CheckpointManifest header = PlannedHeader(*assignment);
  header.set_step(step);
  *header.mutable_user_metadata() = user_metadata;
  return header;
}

uint64_t SavePlan::ManifestBytes() const {
  // A message's size is its fields' sizes: the template's header is this
  // save's but for the step and the metadata.
  return PlannedManifestBytes(*assignment) - PlannedHeader(*assignment).ByteSizeLong() +
         Header().ByteSizeLong();
}

absl::StatusOr<SavePlan> SavePlanCache::Plan(absl::Span<const v1::NodeSavePlan> nodes,
                                             const SavePlannerOptions& options, bool* hit) {
  std::vector<std::string> host_keys;
  host_keys.reserve(nodes.size());
  for (const v1::NodeSavePlan& node : nodes) host_keys.push_back(HostPlanKey(node));
  return Plan(nodes, host_keys, options, hit);
}

absl::StatusOr<SavePlan> SavePlanCache::Plan(absl::Span<const v1::NodeSavePlan> nodes,
                                             absl::Span<const std::string> host_keys,
                                             const SavePlannerOptions& options, bool* hit) {
  if (hit != nullptr) *hit = false;
  if (nodes.empty()) return PlanSave(nodes, options).status();  // names the error
  if (host_keys.size() != nodes.size()) {
    return absl::InternalError(absl::StrCat("the plan cache got ", host_keys.size(),
                                            " host keys for ", nodes.size(), " hosts"));
  }
  const v1::NodeSavePlan& first = nodes.front();
  SavePlan plan;
  plan.step = first.step();
  for (const v1::NodeSavePlan& node : nodes) {
    for (const auto& [k, v] : node.user_metadata()) plan.user_metadata[k] = v;
  }
  std::shared_ptr<const Cached> cached;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(first.job());
    if (it != entries_.end()) cached = it->second.cached;
  }
  std::string key = PlanKeyOfHosts(host_keys);
  if (cached != nullptr && !key.empty() && key == cached->key) {
    // What may differ is checked as PlanSave would.
    if (absl::Status s = ValidateSaveHeader(first, options); !s.ok()) return s;
    for (const v1::NodeSavePlan& node : nodes) {
      if (node.step() != first.step()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "host ", node.host().host(), " disagrees on job, step, world size or partial"));
      }
    }
    plan.assignment = cached->assignment;
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(first.job());
    if (it != entries_.end() && it->second.cached == cached) it->second.last_use = ++clock_;
    ++hits_;
    if (hit != nullptr) *hit = true;
    return plan;
  }
  // Its scratch within the coordinator's planning memory, held while it
  // is planned (the plan itself is then the cache's to keep or drop).
  std::optional<PlanBudget::Reservation> reserved;
  if (options.budget != nullptr) {
    absl::StatusOr<PlanBudget::Reservation> reservation =
        options.budget->Reserve(SaveScratchBytes(nodes),
                                absl::StrCat("the save plan of job ", first.job(), " step ",
                                             first.step(), " (", nodes.size(), " hosts)"),
                                options.budget_wait);
    if (!reservation.ok()) {
      absl::MutexLock lock(&mu_);
      ++misses_;
      return reservation.status();
    }
    reserved.emplace(*std::move(reservation));
  }
  absl::StatusOr<std::shared_ptr<const v1::SaveAssignment>> planned =
      PlanSaveShared(nodes, options);
  reserved.reset();
  if (!planned.ok()) {
    absl::MutexLock lock(&mu_);
    ++misses_;
    return planned.status();
  }
  const std::shared_ptr<const v1::SaveAssignment>& assignment = *planned;
  plan.assignment = assignment;
  const uint64_t bytes = key.size() + AssignmentBytes(*assignment);
  std::shared_ptr<Cached> fresh;
  if (bytes <= max_bytes_ && !key.empty()) {  // else planned every time
    fresh = std::make_shared<Cached>();
    fresh->key = std::move(key);
    fresh->assignment = assignment;
  }
  absl::MutexLock lock(&mu_);
  ++misses_;
  if (fresh == nullptr) return plan;
  auto old = entries_.find(first.job());
  if (old != entries_.end()) {
    bytes_ -= old->second.bytes;
    entries_.erase(old);
  }
  Entry entry;
  entry.cached = std::move(fresh);
  entry.bytes = bytes;
  entry.last_use = ++clock_;
  bytes_ += bytes;
  entries_.emplace(first.job(), std::move(entry));
  EvictLocked();
  return plan;
}

void SavePlanCache::EvictLocked() {
  while (bytes_ > max_bytes_ && !entries_.empty()) {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    bytes_ -= oldest->second.bytes;
    entries_.erase(oldest);
  }
}

PlanCacheStats SavePlanCache::Stats() const {
  absl::MutexLock lock(&mu_);
  return PlanCacheStats{hits_, misses_, bytes_, entries_.size()};
}

}  // namespace ckpt::planning
