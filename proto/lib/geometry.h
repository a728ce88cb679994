// Shard geometry: the one routine behind resharding (DESIGN.md §3).
//
// A shard of a tensor is either a box (per-dimension offsets and lengths) or
// a flat range of the row-major flattened tensor. Both reduce to a sorted
// list of contiguous element runs in flattened space; a shard's bytes are
// stored "packed": its elements in ascending flattened order, no gaps.
// Resharding a requested region R from a stored region S is the
// intersection of their runs, expressed as byte offsets into S's packed
// bytes and R's packed bytes.
//
// All arithmetic is overflow-checked: shapes whose element or byte counts do
// not fit in int64 are rejected with INVALID_ARGUMENT, never wrapped.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef CKPT_PROTO_LIB_GEOMETRY_H_
#define CKPT_PROTO_LIB_GEOMETRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckpt::geo {

using Shape = std::vector<int64_t>;

// Either a box or a flat range. A default-constructed Region is the whole
// tensor (kind kWhole), whatever its shape.
struct Region {
  enum class Kind { kWhole, kBox, kFlat };
  Kind kind = Kind::kWhole;
  std::vector<int64_t> offsets;  // kBox: one per dimension
  std::vector<int64_t> lengths;  // kBox: one per dimension
  int64_t flat_begin = 0;        // kFlat: [flat_begin, flat_end)
  int64_t flat_end = 0;

  static Region Whole();
  static Region Box(std::vector<int64_t> offsets, std::vector<int64_t> lengths);
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

// The region's elements as sorted, coalesced, non-empty runs. Empty for an
// empty region. Validates first.
absl::StatusOr<std::vector<ElementRun>> RegionRuns(const Shape& shape,
                                                   const Region& region);

// The bytes of requested ∩ stored: sorted by dst_offset, adjacent runs
// coalesced (a run is merged with the previous one when both its src and dst
// continue it). Empty when they do not overlap.
absl::StatusOr<std::vector<ByteRun>> IntersectRegions(const Shape& shape,
                                                      int64_t element_size,
                                                      const Region& stored,
                                                      const Region& requested);

// True when the two regions cover exactly the same elements (a box and a
// flat range may be equal).
absl::StatusOr<bool> SameElements(const Shape& shape, const Region& a, const Region& b);
// True when the two regions share at least one element.
absl::StatusOr<bool> Overlaps(const Shape& shape, const Region& a, const Region& b);

}  // namespace ckpt::geo

#endif  // CKPT_PROTO_LIB_GEOMETRY_H_
