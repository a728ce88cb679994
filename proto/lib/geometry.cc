#include "proto/lib/geometry.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckpt::geo {
namespace {

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// "(region ..., shape [...])": appended to region errors so that one line
// says which region of which tensor shape was rejected.
std::string Context(const Shape& shape, const Region& region) {
  return absl::StrCat(" (region ", region.DebugString(), ", shape ",
                      ShapeString(shape), ")");
}

// Product of non-negative factors. A zero factor makes the product zero even
// when the partial product of the others would overflow: a tensor of shape
// [2^32, 2^32, 0] really has no elements.
bool CheckedProduct(const std::vector<int64_t>& factors, int64_t* out) {
  if (std::find(factors.begin(), factors.end(), 0) != factors.end()) {
    *out = 0;
    return true;
  }
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return false;
  }
  *out = product;
  return true;
}

absl::Status ValidateBox(const Shape& shape, const Region& region) {
  const size_t rank = shape.size();
  if (region.offsets.size() != rank || region.lengths.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region box has ", region.offsets.size(), " offsets and ",
        region.lengths.size(), " lengths but the shape has rank ", rank,
        Context(shape, region)));
  }
  for (size_t d = 0; d < rank; ++d) {
    const int64_t offset = region.offsets[d];
    const int64_t length = region.lengths[d];
    if (offset < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "region box offset ", offset, " in dimension ", d, " is negative",
          Context(shape, region)));
    }
    if (length < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "region box length ", length, " in dimension ", d, " is negative",
          Context(shape, region)));
    }
    int64_t end;
    if (__builtin_add_overflow(offset, length, &end) || end > shape[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "region box offset ", offset, " + length ", length,
          " exceeds dimension ", d, " of size ", shape[d],
          Context(shape, region)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFlat(const Shape& shape, const Region& region,
                          int64_t num_elements) {
  if (region.flat_begin < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region flat begin ", region.flat_begin, " is negative",
                     Context(shape, region)));
  }
  if (region.flat_begin > region.flat_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region flat begin ", region.flat_begin, " is after its end ",
        region.flat_end, Context(shape, region)));
  }
  if (region.flat_end > num_elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region flat end ", region.flat_end, " exceeds the ", num_elements,
        " elements of the tensor", Context(shape, region)));
  }
  return absl::OkStatus();
}

// Runs of a valid box. Trailing dimensions the box covers fully are
// contiguous in flattened space, so they and the last partially covered
// dimension form one run; only the dimensions before that are enumerated,
// which keeps the cost proportional to the number of runs, never elements.
std::vector<ElementRun> BoxRuns(const Shape& shape, const Region& box) {
  const int rank = static_cast<int>(shape.size());
  if (std::find(box.lengths.begin(), box.lengths.end(), 0) != box.lengths.end()) {
    return {};
  }
  // Every length is >= 1, so every dimension is too and the element count
  // (already checked to fit) bounds every stride and offset below.
  std::vector<int64_t> stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];

  int last_partial = rank - 1;
  while (last_partial >= 0 && box.lengths[last_partial] == shape[last_partial]) {
    --last_partial;
  }
  if (last_partial < 0) {
    int64_t n = 1;
    for (int64_t dim : shape) n *= dim;
    return {ElementRun{0, n}};
  }

  const int64_t run_length = box.lengths[last_partial] * stride[last_partial];
  int64_t start = 0;
  int64_t num_runs = 1;
  for (int d = 0; d <= last_partial; ++d) start += box.offsets[d] * stride[d];
  for (int d = 0; d < last_partial; ++d) num_runs *= box.lengths[d];

  // A partially covered dimension leaves a gap after each run, so runs from
  // the odometer are already coalesced and ascending.
  std::vector<ElementRun> runs;
  runs.reserve(static_cast<size_t>(num_runs));
  std::vector<int64_t> index(last_partial, 0);
  while (true) {
    runs.push_back(ElementRun{start, run_length});
    int d = last_partial - 1;
    for (; d >= 0; --d) {
      start += stride[d];
      if (++index[d] < box.lengths[d]) break;
      start -= box.lengths[d] * stride[d];
      index[d] = 0;
    }
    if (d < 0) break;
  }
  return runs;
}

// Region runs plus the check that the region's packed bytes fit in int64,
// which makes every byte offset into them representable.
absl::StatusOr<std::vector<ElementRun>> RunsWithByteCheck(
    const Shape& shape, int64_t element_size, const Region& region,
    const char* role) {
  absl::StatusOr<std::vector<ElementRun>> runs = RegionRuns(shape, region);
  if (!runs.ok()) {
    return absl::Status(runs.status().code(),
                        absl::StrCat(role, " ", runs.status().message()));
  }
  int64_t elements = 0;
  for (const ElementRun& run : *runs) elements += run.length;
  int64_t bytes;
  if (__builtin_mul_overflow(elements, element_size, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        role, " region ", region.DebugString(), " of shape ", ShapeString(shape),
        " has ", elements, " elements of ", element_size,
        " bytes: more than 2^63-1 bytes"));
  }
  return runs;
}

}  // namespace

Region Region::Whole() { return Region{}; }

Region Region::Box(std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
  Region r;
  r.kind = Kind::kBox;
  r.offsets = std::move(offsets);
  r.lengths = std::move(lengths);
  return r;
}

Region Region::Flat(int64_t begin, int64_t end) {
  Region r;
  r.kind = Kind::kFlat;
  r.flat_begin = begin;
  r.flat_end = end;
  return r;
}

std::string Region::DebugString() const {
  switch (kind) {
    case Kind::kWhole:
      return "whole";
    case Kind::kBox:
      return absl::StrCat("box{offsets=[", absl::StrJoin(offsets, ","),
                          "],lengths=[", absl::StrJoin(lengths, ","), "]}");
    case Kind::kFlat:
      return absl::StrCat("flat[", flat_begin, ",", flat_end, ")");
  }
  return absl::StrCat("unknown-kind(", static_cast<int>(kind), ")");
}

absl::Status ValidateShape(const Shape& shape) {
  return NumElements(shape).status();
}

absl::StatusOr<int64_t> NumElements(const Shape& shape) {
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has negative dimension ",
                       d, " (", shape[d], ")"));
    }
  }
  int64_t n;
  if (!CheckedProduct(shape, &n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ShapeString(shape), " has more than 2^63-1 elements"));
  }
  return n;
}

absl::StatusOr<int64_t> NumBytes(const Shape& shape, int64_t element_size) {
  if (element_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "element size ", element_size, " for shape ", ShapeString(shape),
        " is not positive"));
  }
  absl::StatusOr<int64_t> n = NumElements(shape);
  if (!n.ok()) return n.status();
  int64_t bytes;
  if (__builtin_mul_overflow(*n, element_size, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ShapeString(shape), " with element size ", element_size,
        " has more than 2^63-1 bytes"));
  }
  return bytes;
}

absl::Status ValidateRegion(const Shape& shape, const Region& region) {
  absl::StatusOr<int64_t> n = NumElements(shape);
  if (!n.ok()) return n.status();
  switch (region.kind) {
    case Region::Kind::kWhole:
      return absl::OkStatus();
    case Region::Kind::kBox:
      return ValidateBox(shape, region);
    case Region::Kind::kFlat:
      return ValidateFlat(shape, region, *n);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("region has unknown kind ", static_cast<int>(region.kind),
                   Context(shape, region)));
}

absl::StatusOr<int64_t> RegionNumElements(const Shape& shape, const Region& region) {
  if (absl::Status s = ValidateRegion(shape, region); !s.ok()) return s;
  switch (region.kind) {
    case Region::Kind::kWhole:
      return NumElements(shape);
    case Region::Kind::kBox: {
      // Each length is at most its dimension, so this cannot overflow once
      // the shape is valid; zeros are handled as in NumElements.
      int64_t n = 0;
      CheckedProduct(region.lengths, &n);
      return n;
    }
    case Region::Kind::kFlat:
      return region.flat_end - region.flat_begin;
  }
  return absl::InternalError("unreachable: region kind validated");
}

absl::StatusOr<std::vector<ElementRun>> RegionRuns(const Shape& shape,
                                                   const Region& region) {
  if (absl::Status s = ValidateRegion(shape, region); !s.ok()) return s;
  switch (region.kind) {
    case Region::Kind::kWhole: {
      const int64_t n = *NumElements(shape);
      if (n == 0) return std::vector<ElementRun>{};
      return std::vector<ElementRun>{{0, n}};
    }
    case Region::Kind::kBox:
      return BoxRuns(shape, region);
    case Region::Kind::kFlat:
      if (region.flat_begin == region.flat_end) return std::vector<ElementRun>{};
      return std::vector<ElementRun>{
          {region.flat_begin, region.flat_end - region.flat_begin}};
  }
  return absl::InternalError("unreachable: region kind validated");
}

absl::StatusOr<std::vector<ByteRun>> IntersectRegions(const Shape& shape,
                                                      int64_t element_size,
                                                      const Region& stored,
                                                      const Region& requested) {
  if (element_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "element size ", element_size, " for shape ", ShapeString(shape),
        " is not positive"));
  }
  // Only the two shards' packed sizes must fit in int64, not the whole
  // tensor's: a small box of a tensor with 2^62 elements is still readable.
  absl::StatusOr<std::vector<ElementRun>> s =
      RunsWithByteCheck(shape, element_size, stored, "stored");
  if (!s.ok()) return s.status();
  absl::StatusOr<std::vector<ElementRun>> r =
      RunsWithByteCheck(shape, element_size, requested, "requested");
  if (!r.ok()) return r.status();

  // Merge in element units, then scale: every offset and length is within
  // one of the two packed sizes checked above, so the products fit.
  std::vector<ByteRun> out;
  size_t i = 0, j = 0;
  int64_t s_packed = 0;  // packed element offset of (*s)[i] in the stored shard
  int64_t r_packed = 0;  // packed element offset of (*r)[j] in the requested shard
  while (i < s->size() && j < r->size()) {
    const ElementRun& a = (*s)[i];
    const ElementRun& b = (*r)[j];
    const int64_t a_end = a.begin + a.length;
    const int64_t b_end = b.begin + b.length;
    const int64_t lo = std::max(a.begin, b.begin);
    const int64_t hi = std::min(a_end, b_end);
    if (lo < hi) {
      const int64_t src = s_packed + (lo - a.begin);
      const int64_t dst = r_packed + (lo - b.begin);
      if (!out.empty() && out.back().src_offset + out.back().length == src &&
          out.back().dst_offset + out.back().length == dst) {
        out.back().length += hi - lo;
      } else {
        out.push_back(ByteRun{src, dst, hi - lo});
      }
    }
    if (a_end <= b_end) {
      s_packed += a.length;
      ++i;
    }
    if (b_end <= a_end) {
      r_packed += b.length;
      ++j;
    }
  }
  for (ByteRun& run : out) {
    run.src_offset *= element_size;
    run.dst_offset *= element_size;
    run.length *= element_size;
  }
  return out;
}

absl::StatusOr<bool> SameElements(const Shape& shape, const Region& a,
                                  const Region& b) {
  // Runs are canonical (sorted, coalesced, non-empty), so equal element sets
  // have equal run lists.
  absl::StatusOr<std::vector<ElementRun>> ra = RegionRuns(shape, a);
  if (!ra.ok()) return ra.status();
  absl::StatusOr<std::vector<ElementRun>> rb = RegionRuns(shape, b);
  if (!rb.ok()) return rb.status();
  return *ra == *rb;
}

absl::StatusOr<bool> Overlaps(const Shape& shape, const Region& a, const Region& b) {
  absl::StatusOr<std::vector<ElementRun>> ra = RegionRuns(shape, a);
  if (!ra.ok()) return ra.status();
  absl::StatusOr<std::vector<ElementRun>> rb = RegionRuns(shape, b);
  if (!rb.ok()) return rb.status();
  size_t i = 0, j = 0;
  while (i < ra->size() && j < rb->size()) {
    const int64_t a_end = (*ra)[i].begin + (*ra)[i].length;
    const int64_t b_end = (*rb)[j].begin + (*rb)[j].length;
    if (std::max((*ra)[i].begin, (*rb)[j].begin) < std::min(a_end, b_end)) return true;
    if (a_end <= b_end) ++i;
    else ++j;
  }
  return false;
}

}  // namespace ckpt::geo
