#include "daemon/coordinator/tier_choice.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ckpt::coordinator {

absl::StatusOr<int64_t> NewestOfTiers(const absl::StatusOr<int64_t>& durable,
                                      const absl::StatusOr<int64_t>& memory) {
  if (!memory.ok()) return durable;
  if (!durable.ok()) return memory;
  return std::max(*durable, *memory);
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
    // Latest: storage's, when it is newer than memory's.
    if (NewestOfTiers(durable.ResolveStep(job, step), in_memory) != in_memory) {
      return std::nullopt;
    }
  }
  return *in_memory;
}

}  // namespace ckpt::coordinator
