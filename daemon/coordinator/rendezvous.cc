#include "daemon/coordinator/rendezvous.h"

#include "absl/strings/str_cat.h"

namespace ckpt::coordinator {

bool AwaitUnlessGone(absl::Mutex& mu, const std::function<bool()>& done, const CallerGone& gone) {
  while (!mu.AwaitWithTimeout(absl::Condition(&done), absl::Milliseconds(200))) {
    if (gone && gone()) return false;
  }
  return true;
}

absl::Status RanksNeverCame(const planning::RankBarrier& ranks, absl::Duration plan_timeout) {
  return absl::DeadlineExceededError(
      absl::StrCat("ranks ", ranks.Missing(16), " (", ranks.expected() - ranks.arrived(), " of ",
                   ranks.world_size(), ") never reached the coordinator within ",
                   absl::FormatDuration(plan_timeout), ": their hosts did not send plans"));
}

}  // namespace ckpt::coordinator
