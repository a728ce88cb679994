// Regions of tensors as they were written down in requests (a box, a flat
// range, or the whole tensor), each distinct one given a dense id.
// Planners at cluster scale see the same region from many ranks
// (data-parallel replicas on save, the ranks of a group on load): interned
// here, its geometry is worked out once, and each further copy costs one
// hash lookup that reads the request's own fields in place.
//
// The table keeps one copy of each distinct region's fields and indexes
// them by id (4 bytes a slot): at 8192 ranks a table of copies was hundreds
// of megabytes that the kernel had to zero first.
// Callers check a box's dimension count against --max_dims before
// interning it.
//
// Thread-safety: none; one planner's.
#ifndef CKPT_DAEMON_PLANNING_REGION_TABLE_H_
#define CKPT_DAEMON_PLANNING_REGION_TABLE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "ckpt/v1/common.pb.h"

namespace ckpt::planning {

class RegionTable {
 public:
  RegionTable() : ids_(0, Hash{}, Eq{this}) {}
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  // The id of `region` of tensor `tensor` (the caller's numbering), and
  // whether it was new. Ids are dense, in order of first appearance.
  std::pair<uint32_t, bool> Intern(int tensor, const v1::Region& region);
  size_t size() const { return entries_.size(); }
  // Starts loading what Intern(tensor, region) will read of the table, for
  // callers that know the next lookups: at a million regions each lookup
  // otherwise waits for memory twice. Boxes of more than `max_dims`
  // dimensions are not looked at.
  void Prefetch(int tensor, const v1::Region& region, int max_dims) const;

 private:
  // A region's identity: its tensor, its kind and its fields (box offsets
  // and lengths; a flat range's begin and end).
  struct View {
    int tensor = 0;
    int kind = 0;
    absl::Span<const int64_t> first;
    absl::Span<const int64_t> second;
  };
  View ViewOf(uint32_t id) const;
  static size_t HashOf(const View& v);

  // A slot of the index: the id and its region's hash, so that growing the
  // index does not read every region again (a million cache misses at
  // each doubling).
  struct Slot {
    size_t hash = 0;
    uint32_t id = 0;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(const View& v) const { return HashOf(v); }
    size_t operator()(const Slot& s) const { return s.hash; }
  };
  struct Eq {
    using is_transparent = void;
    const RegionTable* table;
    static bool Same(const View& a, const View& b);
    bool operator()(const Slot& a, const Slot& b) const { return a.id == b.id; }
    bool operator()(const Slot& a, const View& b) const { return Same(table->ViewOf(a.id), b); }
    bool operator()(const View& a, const Slot& b) const { return Same(a, table->ViewOf(b.id)); }
  };

  // One region, in one cache line: a lookup that finds it compares its
  // fields there. Split over five arrays, a lookup missed the cache up to
  // five times, most of the planners' cost at 8 million shards. Fields of
  // regions of more than kInline (a box of more than 2 dimensions) are
  // kept in `spilled_`.
  static constexpr uint32_t kInline = 4;
  struct alignas(64) Entry {
    int tensor = 0;
    int kind = 0;
    uint32_t first_size = 0;  // how many of its fields are `first`
    uint32_t size = 0;        // all its fields
    uint64_t spilled_at = 0;  // into spilled_, if size > kInline
    int64_t fields[kInline] = {};
  };

  std::vector<Entry> entries_;    // by id
  std::vector<int64_t> spilled_;  // fields of large regions, back to back
  absl::flat_hash_set<Slot, Hash, Eq> ids_;
};

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_REGION_TABLE_H_
