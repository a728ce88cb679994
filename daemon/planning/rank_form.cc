#include "daemon/planning/rank_form.h"

#include <algorithm>

#include "absl/hash/hash.h"

namespace ckpt::planning {

std::pair<uint32_t, bool> RankForms::Intern(absl::Span<const uint64_t> pairs) {
  std::vector<uint32_t>& alike = by_hash_[absl::HashOf(pairs)];
  for (uint32_t f : alike) {
    if (std::equal(pairs.begin(), pairs.end(), pairs_.begin() + first_[f],
                   pairs_.begin() + first_[f + 1])) {
      return {f, false};
    }
  }
  const uint32_t f = static_cast<uint32_t>(size());
  alike.push_back(f);
  pairs_.insert(pairs_.end(), pairs.begin(), pairs.end());
  first_.push_back(pairs_.size());
  return {f, true};
}

}  // namespace ckpt::planning
