// Shard geometry: the one routine behind resharding (docs/design.md §3).
//
// A shard of a tensor is either a box (per-dimension offsets and lengths) or
// a flat range of the row-major flattened tensor; a shard's bytes are stored
// "packed": its elements in ascending flattened order, no gaps.
//
// Cost is proportional to the shape's rank, never to its element count: a
// region is decomposed into a few boxes of the index space, each with an
// affine map from an index to its position in the region's packed bytes
// (a box is one such piece; a flat range of a row-major tensor is at most
// 2 * rank - 1 of them). Box ∩ box is a box, so resharding a requested region
// R from a stored region S is a handful of box intersections, each expressed
// as strided copies (StridedRun): one column of a [2^40, 2] tensor is one
// run repeated 2^40 times, not 2^40 runs. Only the functions that expand
// runs one by one (RegionRuns, IntersectRegions) cost per run, and they take
// a bound.
//
// All arithmetic is overflow-checked: shapes whose element or byte counts do
// not fit in int64 are rejected with INVALID_ARGUMENT, never wrapped.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef CKPT_PROTO_LIB_GEOMETRY_H_
#define CKPT_PROTO_LIB_GEOMETRY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckpt::geo {

// Per-dimension integers. Inline up to rank 6, which covers real tensors:
// planning a cluster-scale save converts millions of shapes and regions,
// and a heap allocation for each was most of its cost.
using Ints = absl::InlinedVector<int64_t, 6>;
using Shape = Ints;

// Either a box or a flat range. A default-constructed Region is the whole
// tensor (kind kWhole), whatever its shape.
struct Region {
  enum class Kind { kWhole, kBox, kFlat };
  Kind kind = Kind::kWhole;
  Ints offsets;            // kBox: one per dimension
  Ints lengths;            // kBox: one per dimension
  int64_t flat_begin = 0;  // kFlat: [flat_begin, flat_end)
  int64_t flat_end = 0;

  static Region Whole();
  static Region Box(Ints offsets, Ints lengths);
  static Region Flat(int64_t begin, int64_t end);
  std::string DebugString() const;
};

// [begin, begin + length) in the flattened global element space.
struct ElementRun {
  int64_t begin = 0;
  int64_t length = 0;
  friend bool operator==(const ElementRun&, const ElementRun&) = default;
};

// One contiguous copy: `length` bytes from `src_offset` in the stored
// shard's packed bytes to `dst_offset` in the requested shard's packed bytes.
struct ByteRun {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t length = 0;
  friend bool operator==(const ByteRun&, const ByteRun&) = default;
};

// A strided copy: for k in [0, count), `length` bytes from
// src_offset + k * src_stride in the stored shard's packed bytes to
// dst_offset + k * dst_stride in the requested shard's packed bytes.
// count >= 1; both strides are 0 when count == 1. Repetitions never overlap
// on either side (strides >= length).
struct StridedRun {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t length = 0;
  int64_t count = 1;
  int64_t src_stride = 0;
  int64_t dst_stride = 0;
  friend bool operator==(const StridedRun&, const StridedRun&) = default;
};

// Default bound on runs produced by one call (strided runs, or expanded runs
// for the expanding functions), so no call allocates without limit.
inline constexpr int64_t kDefaultMaxRuns = int64_t{1} << 20;

// Every dimension >= 0 and the element count fits in int64.
absl::Status ValidateShape(const Shape& shape);
// Product of dimensions (1 for a 0-d tensor), overflow-checked.
absl::StatusOr<int64_t> NumElements(const Shape& shape);
// NumElements * element_size, overflow-checked.
absl::StatusOr<int64_t> NumBytes(const Shape& shape, int64_t element_size);

// The region lies inside the shape: box rank equals shape rank, offsets and
// lengths >= 0, offset + length <= dim (overflow-checked); a flat range
// satisfies 0 <= begin <= end <= NumElements(shape).
absl::Status ValidateRegion(const Shape& shape, const Region& region);
absl::StatusOr<int64_t> RegionNumElements(const Shape& shape, const Region& region);

// [first, end) of the region in flattened element space: its first element
// and one past its last ({0, 0} for an empty region). Regions whose spans do
// not intersect cannot overlap.
absl::StatusOr<std::pair<int64_t, int64_t>> RegionSpan(const Shape& shape, const Region& region);

// The bytes of requested ∩ stored as strided runs, sorted by dst_offset,
// neighbouring single runs coalesced. Cost: O(pieces^2 * rank) plus the runs
// produced; RESOURCE_EXHAUSTED (naming --max_runs_per_shard) when more than
// `max_runs` runs would be needed (an intersection whose structure has more
// than one strided level, e.g. a 3-d box cut in its two inner dimensions,
// needs one run per outer index).
absl::StatusOr<std::vector<StridedRun>> IntersectRegionsStrided(const Shape& shape,
                                                                int64_t element_size,
                                                                const Region& stored,
                                                                const Region& requested,
                                                                int64_t max_runs = kDefaultMaxRuns);

// How many strided runs IntersectRegionsStrided would produce before
// coalescing (an upper bound), without producing them; saturates at
// 2^63-1. Cost O(pieces^2 * rank).
absl::StatusOr<int64_t> StridedRunCount(const Shape& shape, const Region& stored,
                                        const Region& requested);

// The region's elements as sorted, coalesced, non-empty runs. Empty for an
// empty region. Validates first. Expands: RESOURCE_EXHAUSTED beyond
// `max_runs` runs.
absl::StatusOr<std::vector<ElementRun>> RegionRuns(const Shape& shape, const Region& region,
                                                   int64_t max_runs = kDefaultMaxRuns);

// IntersectRegionsStrided expanded to contiguous runs: sorted by dst_offset,
// adjacent runs coalesced (a run is merged with the previous one when both
// its src and dst continue it). Empty when they do not overlap.
// RESOURCE_EXHAUSTED beyond `max_runs` expanded runs.
absl::StatusOr<std::vector<ByteRun>> IntersectRegions(const Shape& shape, int64_t element_size,
                                                      const Region& stored, const Region& requested,
                                                      int64_t max_runs = kDefaultMaxRuns);

// True when the two regions cover exactly the same elements (a box and a
// flat range may be equal).
absl::StatusOr<bool> SameElements(const Shape& shape, const Region& a, const Region& b);
// True when the two regions share at least one element.
absl::StatusOr<bool> Overlaps(const Shape& shape, const Region& a, const Region& b);
// Number of elements the two regions share.
absl::StatusOr<int64_t> CommonElements(const Shape& shape, const Region& a, const Region& b);

}  // namespace ckpt::geo

#endif  // CKPT_PROTO_LIB_GEOMETRY_H_
