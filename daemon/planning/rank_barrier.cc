#include "daemon/planning/rank_barrier.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckpt::planning {

RankBarrier::RankBarrier(int world_size, int expected, absl::Time deadline)
    : world_size_(world_size), expected_(std::min(expected, world_size)), deadline_(deadline) {}

absl::StatusOr<bool> RankBarrier::Arrive(int rank) {
  if (rank < 0 || rank >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside the world of ", world_size_));
  }
  if (complete()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " arrived after all ", expected_, " expected ranks"));
  }
  if (!arrived_.insert(rank).second) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " arrived twice"));
  }
  return complete();
}

std::vector<int> RankBarrier::MissingRanks(size_t limit, const std::vector<int>* candidates) const {
  std::vector<int> missing;
  if (candidates != nullptr) {
    for (int r : *candidates) {
      if (missing.size() >= limit) break;
      if (!Arrived(r)) missing.push_back(r);
    }
    return missing;
  }
  // Walks the world past the arrived ranks: at most limit + arrived steps.
  for (int r = 0; r < world_size_ && missing.size() < limit; ++r) {
    if (!Arrived(r)) missing.push_back(r);
  }
  return missing;
}

std::string RankBarrier::Missing(size_t limit, const std::vector<int>* candidates) const {
  const std::vector<int> shown = MissingRanks(limit, candidates);
  const bool more = static_cast<int>(shown.size()) < expected_ - arrived();
  return absl::StrCat("[", absl::StrJoin(shown, ", "),
                      more ? (shown.empty() ? "..." : ", ...") : "", "]");
}

}  // namespace ckpt::planning
