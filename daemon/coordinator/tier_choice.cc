#include "daemon/coordinator/tier_choice.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ckpt::coordinator {

bool SavedAfter(const SavedAt& a, const SavedAt& b) {
  if (a.created_unix_ms != b.created_unix_ms) return a.created_unix_ms > b.created_unix_ms;
  return a.step > b.step;
}

absl::StatusOr<int64_t> LatestOfTiers(Catalog& durable, Catalog* memory, const std::string& job) {
  absl::StatusOr<int64_t> on_disk = durable.ResolveStep(job, -1);
  if (memory == nullptr) return on_disk;
  absl::StatusOr<int64_t> in_memory = memory->ResolveStep(job, -1);
  if (!in_memory.ok()) return on_disk;
  if (!on_disk.ok() || *on_disk == *in_memory) return in_memory;
  absl::StatusOr<v1::CheckpointManifest> disk_manifest = durable.ReadManifest(job, *on_disk);
  if (!disk_manifest.ok()) return in_memory;
  absl::StatusOr<v1::CheckpointManifest> memory_manifest = memory->ReadManifest(job, *in_memory);
  if (!memory_manifest.ok()) return on_disk;
  const SavedAt disk{*on_disk, disk_manifest->created_unix_ms()};
  const SavedAt held{*in_memory, memory_manifest->created_unix_ms()};
  return SavedAfter(disk, held) ? on_disk : in_memory;
}

absl::StatusOr<std::optional<int64_t>> MemoryStepToLoad(Catalog& durable, Catalog* memory,
                                                        const std::string& job, int64_t step,
                                                        v1::LoadTier from,
                                                        absl::string_view holder) {
  if (from == v1::LOAD_TIER_DURABLE) return std::nullopt;
  if (memory == nullptr) {
    if (from == v1::LOAD_TIER_ANY) return std::nullopt;
    return absl::FailedPreconditionError(absl::StrCat("the load asks for the memory tier, but ",
                                                      holder, " has none (--memory_tier_bytes)"));
  }
  absl::StatusOr<int64_t> in_memory = memory->ResolveStep(job, step);
  if (!in_memory.ok()) {
    if (from == v1::LOAD_TIER_MEMORY) {
      return absl::Status(in_memory.status().code(),
                          absl::StrCat("in the memory tier: ", in_memory.status().message()));
    }
    return std::nullopt;
  }
  if (step < 0 && from == v1::LOAD_TIER_ANY) {
    // Latest: storage's, when it was saved after memory's.
    absl::StatusOr<int64_t> latest = LatestOfTiers(durable, memory, job);
    if (!latest.ok() || *latest != *in_memory) return std::nullopt;
  }
  return *in_memory;
}

}  // namespace ckpt::coordinator
