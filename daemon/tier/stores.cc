#include "daemon/tier/stores.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/tier_choice.h"
#include "proto/lib/status_context.h"

namespace ckpt::tier {

absl::StatusOr<std::optional<int64_t>> Stores::MemoryStepToLoad(const std::string& job,
                                                                int64_t step,
                                                                v1::LoadTier from) const {
  return coordinator::MemoryStepToLoad(durable_, memory_catalog(), job, step, from, "this ckptd");
}

absl::StatusOr<std::vector<Stores::Copy>> Stores::CopiesOf(const std::string& job,
                                                           int64_t step) const {
  absl::StatusOr<int64_t> on_disk = durable_.ResolveStep(job, step);
  absl::StatusOr<int64_t> in_memory = absl::NotFoundError("no memory tier");
  if (memory_ != nullptr) in_memory = memory_catalog()->ResolveStep(job, step);
  // A named step is the same step in either store; latest is the rule's.
  absl::StatusOr<int64_t> wanted =
      step >= 0 ? (on_disk.ok() ? on_disk : in_memory)
                : coordinator::LatestOfTiers(durable_, memory_catalog(), job);
  if (!wanted.ok()) return wanted.status();
  std::vector<Copy> copies;
  if (in_memory.ok() && *in_memory == *wanted) {
    copies.push_back({"memory", &memory_->backend(), memory_catalog(), *wanted});
  }
  if (on_disk.ok() && *on_disk == *wanted) {
    copies.push_back({"durable", &durable_backend_, &durable_, *wanted});
  } else if (step < 0 && on_disk.ok()) {
    // Storage's latest is older: it may still hold memory's step.
    if (absl::StatusOr<bool> has = durable_.StepExists(job, *wanted); has.ok() && *has) {
      copies.push_back({"durable", &durable_backend_, &durable_, *wanted});
    }
  }
  return copies;
}

absl::StatusOr<std::vector<v1::CheckpointSummary>> Stores::List(const std::string& job) const {
  absl::StatusOr<std::vector<v1::CheckpointSummary>> durable = durable_.ListCheckpoints(job);
  absl::StatusOr<std::vector<v1::CheckpointSummary>> memory = absl::NotFoundError("no memory tier");
  if (memory_ != nullptr) memory = memory_catalog()->ListCheckpoints(job);
  if (!durable.ok() && !(absl::IsNotFound(durable.status()) && memory.ok())) {
    return durable.status();
  }
  // One line per step, naming the tiers that hold it.
  std::map<int64_t, v1::CheckpointSummary> steps;
  std::optional<coordinator::SavedAt> latest_durable;
  std::optional<coordinator::SavedAt> latest_memory;
  auto add = [&](absl::StatusOr<std::vector<v1::CheckpointSummary>>& list, const char* tier,
                 std::optional<coordinator::SavedAt>& latest) {
    if (!list.ok()) return;
    for (v1::CheckpointSummary& summary : *list) {
      if (summary.latest())
        latest = coordinator::SavedAt{summary.step(), summary.created_unix_ms()};
      auto [it, added] = steps.emplace(summary.step(), summary);
      if (!added && it->second.broken() && !summary.broken()) {
        v1::CheckpointSummary kept = summary;
        *kept.mutable_tiers() = it->second.tiers();
        it->second = std::move(kept);
      }
      it->second.add_tiers(tier);
    }
  };
  add(durable, "durable", latest_durable);
  add(memory, "memory", latest_memory);
  // Latest as a load takes it (tier_choice.h): the latest of the store
  // whose latest was saved last. A broken latest has no time: it loses.
  std::optional<coordinator::SavedAt> latest = latest_durable;
  if (latest_memory.has_value() &&
      (!latest.has_value() || !coordinator::SavedAfter(*latest, *latest_memory))) {
    latest = latest_memory;
  }
  std::vector<v1::CheckpointSummary> out;
  out.reserve(steps.size());
  for (auto& [step, summary] : steps) {
    summary.set_latest(latest.has_value() && step == latest->step);
    out.push_back(std::move(summary));
  }
  return out;
}

absl::Status Stores::AdmitSave(const std::string& job, int64_t step, v1::SaveTier tier) const {
  if (memory_ == nullptr) return absl::OkStatus();
  const bool to_memory = tier != v1::SAVE_TIER_DURABLE;
  coordinator::Catalog& other = to_memory ? durable_ : *memory_catalog();
  absl::StatusOr<bool> exists = other.StepExists(job, step);
  if (!exists.ok()) return WithContext(exists.status(), "checking the other tier for the step");
  if (!*exists) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrCat("step ", step, " of job ", job, " is committed ",
                                               to_memory ? "on storage" : "in the memory tier",
                                               " already; save another step number"));
}

}  // namespace ckpt::tier
