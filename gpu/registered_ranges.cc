#include "gpu/registered_ranges.h"

#include <algorithm>

namespace ckpt::gpu {

void RegisteredRanges::Add(uintptr_t begin, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  ranges_[begin] = begin + bytes;
}

void RegisteredRanges::Remove(uintptr_t begin) {
  absl::MutexLock lock(&mu_);
  ranges_.erase(begin);
}

uint64_t RegisteredRanges::PieceAt(uintptr_t at, uint64_t bytes) const {
  absl::MutexLock lock(&mu_);
  const uintptr_t end = at + bytes;
  auto next = ranges_.upper_bound(at);  // the first range beginning after at
  if (next != ranges_.begin()) {
    auto holding = std::prev(next);
    // Inside a registration: up to its end.
    if (holding->second > at) return std::min(end, holding->second) - at;
  }
  // Outside all: up to the next one's start.
  if (next != ranges_.end() && next->first < end) return next->first - at;
  return bytes;
}

RegisteredRanges& ProcessRegistrations() {
  static RegisteredRanges* ranges = new RegisteredRanges();
  return *ranges;
}

}  // namespace ckpt::gpu
