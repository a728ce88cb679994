// A rank's list of shards (on save) or requests (on load) in short, for
// finding whole-rank replicas: each entry as a (tensor, region) pair in
// the planner's numbering of the plan's tensors and regions. Data-parallel
// replicas list the very same shards or ask for the very same regions, so
// a replica's pairs equal an earlier rank's; planners work out the entries
// of one rank per form and give its replicas the same answers without a
// lookup per entry.
//
// Thread-safety: none; one planner's.
#ifndef CKPT_DAEMON_PLANNING_RANK_FORM_H_
#define CKPT_DAEMON_PLANNING_RANK_FORM_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace ckpt::planning {

// One entry of a form: the planner's tensor and region numbers.
inline uint64_t FormPair(int tensor, uint32_t region) {
  return static_cast<uint64_t>(tensor) << 32 | region;
}
inline int TensorOfPair(uint64_t pair) { return static_cast<int>(pair >> 32); }
inline uint32_t RegionOfPair(uint64_t pair) { return static_cast<uint32_t>(pair); }

class RankForms {
 public:
  // The form of a rank with these entries, numbered in order of first
  // appearance, and whether it is new (no earlier rank had the very same
  // entries, compared in full, not by hash alone).
  std::pair<uint32_t, bool> Intern(absl::Span<const uint64_t> pairs);

  size_t size() const { return first_.size() - 1; }
  // Where form f's entries start among all forms' entries (size() + 1
  // bounds: the forms' entries lie one after the other).
  size_t first(size_t f) const { return first_[f]; }
  size_t entries() const { return pairs_.size(); }

 private:
  std::vector<uint64_t> pairs_;  // every form's entries, one form after the other
  std::vector<size_t> first_ = {0};
  absl::flat_hash_map<size_t, std::vector<uint32_t>> by_hash_;
};

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_RANK_FORM_H_
