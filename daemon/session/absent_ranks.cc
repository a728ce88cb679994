#include "daemon/session/absent_ranks.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ckpt::session {

AbsentRanks::AbsentRanks(std::string job, int world_size, int local_world_size)
    : job_(std::move(job)), world_size_(world_size), local_world_size_(local_world_size) {}

absl::Status AbsentRanks::Check(absl::Time now, absl::Duration grace,
                                const std::vector<int>& attached,
                                const std::function<bool(int)>& arrived) {
  if (local_world_size_ < world_size_) {
    if (static_cast<int>(attached.size()) >= local_world_size_) {
      short_since_.reset();
      return absl::OkStatus();
    }
    if (!short_since_.has_value()) short_since_ = now;
    if (now - *short_since_ < grace) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat(
        "only ", attached.size(), " of the ", local_world_size_, " ranks of job ", job_,
        " on this host have a session here (the others never attached or are gone) for ",
        absl::FormatDuration(grace), " (--rank_grace_s); aborted"));
  }
  // The lowest absent ranks, walking the world past the attached ones.
  std::map<int, absl::Time> since;
  auto next_attached = attached.begin();
  for (int r = 0; r < world_size_ && since.size() < kWatched; ++r) {
    while (next_attached != attached.end() && *next_attached < r) ++next_attached;
    if (next_attached != attached.end() && *next_attached == r) continue;
    if (arrived(r)) continue;
    auto watched = since_.find(r);
    since.emplace(r, watched == since_.end() ? now : watched->second);
  }
  since_ = std::move(since);
  for (const auto& [rank, from] : since_) {
    if (now - from < grace) continue;
    return absl::AbortedError(absl::StrCat("rank ", rank, " of job ", job_,
                                           " has no session here (never attached or gone) for ",
                                           absl::FormatDuration(now - from), " (--rank_grace_s ",
                                           absl::FormatDuration(grace), "); aborted"));
  }
  return absl::OkStatus();
}

}  // namespace ckpt::session
