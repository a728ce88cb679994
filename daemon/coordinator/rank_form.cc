#include "daemon/coordinator/rank_form.h"

#include "absl/hash/hash.h"
#include "absl/types/span.h"
#include "proto/lib/region_convert.h"

namespace ckpt::coordinator {

void RankForm::Clear() {
  codes.clear();
  regions.clear();
  valid = true;
}

void RankForm::Add(int tensor, const v1::Region& region) {
  if (!valid) return;
  // Consecutive entries nearly always share their region: the last one is
  // compared first.
  size_t r = regions.size();
  if (r == 0 || !SameRegion(*regions[r - 1], region)) {
    r = 0;
    while (r < regions.size() && !SameRegion(*regions[r], region)) ++r;
    if (r == regions.size()) {
      if (regions.size() == kMaxRegions) {
        valid = false;
        return;
      }
      regions.push_back(&region);
    }
  } else {
    --r;
  }
  codes.push_back(static_cast<uint64_t>(tensor) << 8 | r);
}

size_t RankForm::Hash() const {
  size_t h = absl::HashOf(absl::MakeConstSpan(codes));
  for (const v1::Region* r : regions) h = HashRegion(h, *r);
  return h;
}

bool RankForm::operator==(const RankForm& other) const {
  if (codes != other.codes || regions.size() != other.regions.size()) return false;
  for (size_t r = 0; r < regions.size(); ++r) {
    if (!SameRegion(*regions[r], *other.regions[r])) return false;
  }
  return true;
}

const RankForms::Known* RankForms::Find(const RankForm& form) const {
  if (!form.valid) return nullptr;
  auto found = by_hash_.find(form.Hash());
  if (found == by_hash_.end()) return nullptr;
  for (uint32_t k : found->second) {
    if (known_[k].form == form) return &known_[k];
  }
  return nullptr;
}

void RankForms::Add(const RankForm& form, size_t first) {
  if (!form.valid) return;
  by_hash_[form.Hash()].push_back(static_cast<uint32_t>(known_.size()));
  known_.push_back(Known{form, first});
}

}  // namespace ckpt::coordinator
