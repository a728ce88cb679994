// A rank's list of tensor regions in short, for finding whole-rank
// replicas. Data-parallel replicas list the very same shards (on save) or
// ask for the very same regions (on load), and a rank holds the same rows
// or range of every tensor of a layer, so a list of a thousand shards is a
// thousand small codes over a few distinct regions, and a replica's form
// equals an earlier rank's. Planners look up the shards of one rank per
// form and give its replicas the same answers without a lookup per shard.
//
// Thread-safety: none; one planner's. Regions are the requests' own
// messages, which must outlive the forms.
#ifndef CKPT_DAEMON_COORDINATOR_RANK_FORM_H_
#define CKPT_DAEMON_COORDINATOR_RANK_FORM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "ckpt/v1/common.pb.h"

namespace ckpt::coordinator {

struct RankForm {
  static constexpr size_t kMaxRegions = 8;  // more distinct regions: no form
  std::vector<uint64_t> codes;              // per entry: tensor << 8 | region
  std::vector<const v1::Region*> regions;   // the distinct ones, as written
  bool valid = true;

  void Clear();
  // The next entry: the caller's number for its tensor, and its region.
  void Add(int tensor, const v1::Region& region);
  // Which of `regions` entry i holds (of a valid form).
  int RegionOf(size_t i) const { return static_cast<int>(codes[i] & 0xff); }
  size_t Hash() const;
  bool operator==(const RankForm& other) const;
};

// Forms of ranks that were planned entry by entry, with where their
// answers start in the planner's per-entry arrays.
class RankForms {
 public:
  struct Known {
    RankForm form;
    size_t first = 0;
  };
  // An earlier rank of exactly this form (compared in full), or null; null
  // too for a form that is not valid.
  const Known* Find(const RankForm& form) const;
  // Records a valid form; an invalid one is not kept.
  void Add(const RankForm& form, size_t first);

 private:
  std::vector<Known> known_;
  absl::flat_hash_map<size_t, std::vector<uint32_t>> by_hash_;
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_RANK_FORM_H_
