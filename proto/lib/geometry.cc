#include "proto/lib/geometry.h"

#include <algorithm>
#include <cstddef>
#include <limits>
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
  return absl::StrCat(" (region ", region.DebugString(), ", shape ", ShapeString(shape), ")");
}

// Product of non-negative factors. A zero factor makes the product zero even
// when the partial product of the others would overflow: a tensor of shape
// [2^32, 2^32, 0] really has no elements.
bool CheckedProduct(const Ints& factors, int64_t* out) {
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
        "region box has ", region.offsets.size(), " offsets and ", region.lengths.size(),
        " lengths but the shape has rank ", rank, Context(shape, region)));
  }
  for (size_t d = 0; d < rank; ++d) {
    const int64_t offset = region.offsets[d];
    const int64_t length = region.lengths[d];
    if (offset < 0) {
      return absl::InvalidArgumentError(absl::StrCat("region box offset ", offset, " in dimension ",
                                                     d, " is negative", Context(shape, region)));
    }
    if (length < 0) {
      return absl::InvalidArgumentError(absl::StrCat("region box length ", length, " in dimension ",
                                                     d, " is negative", Context(shape, region)));
    }
    int64_t end;
    if (__builtin_add_overflow(offset, length, &end) || end > shape[d]) {
      return absl::InvalidArgumentError(absl::StrCat("region box offset ", offset, " + length ",
                                                     length, " exceeds dimension ", d, " of size ",
                                                     shape[d], Context(shape, region)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFlat(const Shape& shape, const Region& region, int64_t num_elements) {
  if (region.flat_begin < 0) {
    return absl::InvalidArgumentError(absl::StrCat("region flat begin ", region.flat_begin,
                                                   " is negative", Context(shape, region)));
  }
  if (region.flat_begin > region.flat_end) {
    return absl::InvalidArgumentError(absl::StrCat("region flat begin ", region.flat_begin,
                                                   " is after its end ", region.flat_end,
                                                   Context(shape, region)));
  }
  if (region.flat_end > num_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("region flat end ", region.flat_end, " exceeds the ", num_elements,
                     " elements of the tensor", Context(shape, region)));
  }
  return absl::OkStatus();
}

// A box of the (squeezed) index space together with the affine map from an
// index to the element's position in its region's packed order:
//   packed(idx) = base + sum_d (idx[d] - off[d]) * stride[d].
struct Piece {
  Ints off;
  Ints len;
  int64_t base = 0;
  Ints stride;
};

// A valid region as pieces over the shape with its size-1 dimensions
// dropped: they change no position, and dropping them bounds the rank by 63
// for any non-empty tensor, so nothing here costs more than O(63^2) however
// many dimensions the request spelled out.
struct Pieces {
  Ints dims;                             // kept dimensions (all >= 2)
  Ints global;                           // their row-major strides in the full tensor
  absl::InlinedVector<size_t, 6> kept;   // index of each kept dimension in the shape
  absl::InlinedVector<Piece, 1> pieces;  // ascending, disjoint; empty for an empty region
};

Pieces Squeeze(const Shape& shape) {
  Pieces p;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1) {
      p.dims.push_back(shape[d]);
      p.kept.push_back(d);
    }
  }
  p.global.assign(p.dims.size(), 1);
  for (int d = static_cast<int>(p.dims.size()) - 2; d >= 0; --d) {
    p.global[d] = p.global[d + 1] * p.dims[d + 1];
  }
  return p;
}

Ints RowMajorStrides(const Ints& lengths) {
  Ints stride(lengths.size(), 1);
  for (int d = static_cast<int>(lengths.size()) - 2; d >= 0; --d) {
    stride[d] = stride[d + 1] * lengths[d + 1];
  }
  return stride;
}

// Decomposes the flat range [begin, end) (non-empty, inside a non-empty
// tensor) into aligned boxes: climbing, the partial tail of each dimension
// from `begin` up to the next boundary of the enclosing one; descending, the
// whole units of each dimension down to `end`. At most 2 * rank - 1 pieces.
void FlatPieces(int64_t begin, int64_t end, Pieces* p) {
  const int m = static_cast<int>(p->dims.size());
  auto index_of = [&](int64_t x, int d) { return (x / p->global[d]) % p->dims[d]; };
  auto emit = [&](int64_t start, int d, int64_t count) {
    Piece piece;
    piece.off.resize(m);
    piece.len.resize(m);
    for (int k = 0; k < m; ++k) {
      if (k < d) {
        piece.off[k] = index_of(start, k);
        piece.len[k] = 1;
      } else if (k == d) {
        piece.off[k] = index_of(start, k);
        piece.len[k] = count;
      } else {
        piece.off[k] = 0;
        piece.len[k] = p->dims[k];
      }
    }
    piece.base = start - begin;
    piece.stride = p->global;
    p->pieces.push_back(std::move(piece));
  };
  int64_t b = begin;
  int d = m - 1;
  // Invariant: b is a multiple of global[d].
  while (d > 0) {
    const int64_t up = p->global[d - 1];
    if (b % up == 0) {
      --d;
      continue;
    }
    const int64_t next = (b / up + 1) * up;  // <= the element count
    if (next > end) break;                   // [b, end) lies inside one index of dimension d - 1
    emit(b, d, p->dims[d] - index_of(b, d));
    b = next;
    --d;
  }
  for (; b < end; ++d) {
    const int64_t count = (end - b) / p->global[d];
    if (count > 0) {
      emit(b, d, count);
      b += count * p->global[d];
    }
  }
}

// Pieces of a validated region.
Pieces RegionPieces(const Shape& shape, const Region& region) {
  int64_t n = 0;
  CheckedProduct(shape, &n);  // validated: fits
  // An empty tensor has no pieces. Its other dimensions are unbounded (the
  // product is 0 whatever they are), so their strides, which Squeeze
  // multiplies out, could overflow: none are computed (found by tests/fuzz).
  if (n == 0) return Pieces{};
  Pieces p = Squeeze(shape);
  const int m = static_cast<int>(p.dims.size());
  switch (region.kind) {
    case Region::Kind::kWhole:
      p.pieces.push_back(Piece{Ints(m, 0), p.dims, 0, p.global});
      break;
    case Region::Kind::kBox: {
      if (std::find(region.lengths.begin(), region.lengths.end(), 0) != region.lengths.end()) {
        break;
      }
      Piece piece;
      for (size_t k : p.kept) {
        piece.off.push_back(region.offsets[k]);
        piece.len.push_back(region.lengths[k]);
      }
      piece.stride = RowMajorStrides(piece.len);
      p.pieces.push_back(std::move(piece));
      break;
    }
    case Region::Kind::kFlat:
      if (region.flat_begin == region.flat_end) break;
      if (m == 0) {
        p.pieces.emplace_back();  // in place: gcc 14 warns of moving a temporary
        break;
      }
      FlatPieces(region.flat_begin, region.flat_end, &p);
      break;
  }
  return p;
}

// a ∩ b as a box (off, len); false when empty.
bool IntersectBoxes(const Piece& a, const Piece& b, Ints* off, Ints* len) {
  const size_t m = a.off.size();
  off->resize(m);
  len->resize(m);
  for (size_t d = 0; d < m; ++d) {
    const int64_t lo = std::max(a.off[d], b.off[d]);
    const int64_t hi = std::min(a.off[d] + a.len[d], b.off[d] + b.len[d]);
    if (lo >= hi) return false;
    (*off)[d] = lo;
    (*len)[d] = hi - lo;
  }
  return true;
}

int64_t PackedAt(const Piece& p, const Ints& idx) {
  int64_t pos = p.base;
  for (size_t d = 0; d < idx.size(); ++d) pos += (idx[d] - p.off[d]) * p.stride[d];
  return pos;
}

absl::StatusOr<int64_t> CommonElementsOfPieces(const Pieces& a, const Pieces& b) {
  int64_t total = 0;
  Ints off, len;
  for (const Piece& pa : a.pieces) {
    for (const Piece& pb : b.pieces) {
      if (!IntersectBoxes(pa, pb, &off, &len)) continue;
      int64_t n = 1;
      for (int64_t l : len) n *= l;  // inside a valid shape: fits
      total += n;                    // disjoint pieces: at most the element count
    }
  }
  return total;
}

absl::Status ValidateElementSize(const Shape& shape, int64_t element_size) {
  if (element_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("element size ", element_size, " for shape ",
                                                   ShapeString(shape), " is not positive"));
  }
  return absl::OkStatus();
}

// Validates the region and checks that its packed bytes fit in int64, which
// makes every byte offset into them representable.
absl::Status CheckPackedBytes(const Shape& shape, int64_t element_size, const Region& region,
                              const char* role) {
  absl::StatusOr<int64_t> elements = RegionNumElements(shape, region);
  if (!elements.ok()) {
    return absl::Status(elements.status().code(),
                        absl::StrCat(role, " ", elements.status().message()));
  }
  int64_t bytes;
  if (__builtin_mul_overflow(*elements, element_size, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        role, " region ", region.DebugString(), " of shape ", ShapeString(shape), " has ",
        *elements, " elements of ", element_size, " bytes: more than 2^63-1 bytes"));
  }
  return absl::OkStatus();
}

absl::Status TooManyRuns(const Shape& shape, const Region& stored, const Region& requested,
                         const std::string& count, int64_t max_runs) {
  return absl::ResourceExhaustedError(
      absl::StrCat("copying region ", requested.DebugString(), " from region ",
                   stored.DebugString(), " of shape ", ShapeString(shape), " needs ", count,
                   " runs; the limit is ", max_runs, " (--max_runs_per_shard)"));
}

// One level of a nested copy: `count` repetitions `src`/`dst` elements apart.
struct Level {
  int64_t count, src, dst;
};

// The copy of the box `len` between two pieces: a contiguous run of `run`
// elements, repeated over `levels` (inner-first; levels[0] is the run's own
// repetition, the others are enumerated).
struct CopyShape {
  int64_t run = 1;
  absl::InlinedVector<Level, 6> levels;
};

CopyShape PairCopyShape(const Piece& ps, const Piece& pd, const Ints& len) {
  // Levels inner-first; a dimension of length 1 is only an offset.
  absl::InlinedVector<Level, 6> levels;
  for (int d = static_cast<int>(len.size()) - 1; d >= 0; --d) {
    if (len[d] > 1) levels.push_back(Level{len[d], ps.stride[d], pd.stride[d]});
  }
  // The contiguous inner run: levels contiguous on both sides.
  CopyShape out;
  size_t first = 0;
  while (first < levels.size() && levels[first].src == out.run && levels[first].dst == out.run) {
    out.run *= levels[first].count;
    ++first;
  }
  // Merge neighbouring levels that continue each other on both sides.
  for (size_t k = first; k < levels.size(); ++k) {
    const Level& l = levels[k];
    Level* back = out.levels.empty() ? nullptr : &out.levels.back();
    if (back != nullptr && l.src == back->src * back->count && l.dst == back->dst * back->count) {
      back->count *= l.count;
    } else {
      out.levels.push_back(l);
    }
  }
  return out;
}

// Runs of one pair: the product of the enumerated levels; false on overflow.
bool PairRuns(const CopyShape& cs, int64_t* runs) {
  *runs = 1;
  for (size_t k = 1; k < cs.levels.size(); ++k) {
    if (__builtin_mul_overflow(*runs, cs.levels[k].count, runs)) return false;
  }
  return true;
}

}  // namespace

Region Region::Whole() { return Region{}; }

Region Region::Box(Ints offsets, Ints lengths) {
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
      return absl::StrCat("box{offsets=[", absl::StrJoin(offsets, ","), "],lengths=[",
                          absl::StrJoin(lengths, ","), "]}");
    case Kind::kFlat:
      return absl::StrCat("flat[", flat_begin, ",", flat_end, ")");
  }
  return absl::StrCat("unknown-kind(", static_cast<int>(kind), ")");
}

absl::Status ValidateShape(const Shape& shape) { return NumElements(shape).status(); }

absl::StatusOr<int64_t> NumElements(const Shape& shape) {
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape ", ShapeString(shape), " has negative dimension ", d, " (", shape[d], ")"));
    }
  }
  int64_t n;
  if (!CheckedProduct(shape, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeString(shape), " has more than 2^63-1 elements"));
  }
  return n;
}

absl::StatusOr<int64_t> NumBytes(const Shape& shape, int64_t element_size) {
  if (element_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("element size ", element_size, " for shape ",
                                                   ShapeString(shape), " is not positive"));
  }
  absl::StatusOr<int64_t> n = NumElements(shape);
  if (!n.ok()) return n.status();
  int64_t bytes;
  if (__builtin_mul_overflow(*n, element_size, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape),
                                                   " with element size ", element_size,
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
  return absl::InvalidArgumentError(absl::StrCat(
      "region has unknown kind ", static_cast<int>(region.kind), Context(shape, region)));
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

absl::StatusOr<std::pair<int64_t, int64_t>> RegionSpan(const Shape& shape, const Region& region) {
  if (absl::Status s = ValidateRegion(shape, region); !s.ok()) return s;
  const Pieces p = RegionPieces(shape, region);
  if (p.pieces.empty()) return std::pair<int64_t, int64_t>{0, 0};
  auto flat = [&](const Piece& piece, bool last) {
    int64_t g = 0;
    for (size_t d = 0; d < p.dims.size(); ++d) {
      g += (piece.off[d] + (last ? piece.len[d] - 1 : 0)) * p.global[d];
    }
    return g;
  };
  return std::pair<int64_t, int64_t>{flat(p.pieces.front(), false),
                                     flat(p.pieces.back(), true) + 1};
}

absl::StatusOr<std::vector<StridedRun>> IntersectRegionsStrided(const Shape& shape,
                                                                int64_t element_size,
                                                                const Region& stored,
                                                                const Region& requested,
                                                                int64_t max_runs) {
  if (absl::Status s = ValidateElementSize(shape, element_size); !s.ok()) return s;
  // Only the two shards' packed sizes must fit in int64, not the whole
  // tensor's: a small box of a tensor with 2^62 elements is still readable.
  if (absl::Status s = CheckPackedBytes(shape, element_size, stored, "stored"); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPackedBytes(shape, element_size, requested, "requested"); !s.ok()) {
    return s;
  }
  const Pieces src = RegionPieces(shape, stored);
  const Pieces dst = RegionPieces(shape, requested);

  // Work in elements, scale to bytes at the end: every offset is within one
  // of the two packed sizes checked above, so the products fit.
  std::vector<StridedRun> out;
  Ints off, len, idx;
  for (const Piece& ps : src.pieces) {
    for (const Piece& pd : dst.pieces) {
      if (!IntersectBoxes(ps, pd, &off, &len)) continue;
      const CopyShape cs = PairCopyShape(ps, pd, len);
      const absl::InlinedVector<Level, 6>& merged = cs.levels;
      const int64_t run = cs.run;
      // The innermost merged level is the run's repetition; the others are
      // enumerated, one run per outer index.
      int64_t runs_here = 1;
      if (!PairRuns(cs, &runs_here)) {
        return TooManyRuns(shape, stored, requested, "more than 2^63-1", max_runs);
      }
      if (runs_here > max_runs - static_cast<int64_t>(out.size())) {
        return TooManyRuns(shape, stored, requested,
                           absl::StrCat("at least ", out.size() + runs_here), max_runs);
      }
      idx = off;
      StridedRun base;
      base.src_offset = PackedAt(ps, idx);
      base.dst_offset = PackedAt(pd, idx);
      base.length = run;
      if (!merged.empty()) {
        base.count = merged[0].count;
        base.src_stride = merged[0].src;
        base.dst_stride = merged[0].dst;
      }
      // Odometer over the outer merged levels, each a block of dimensions
      // whose combined index advances by `count` steps of (src, dst).
      Ints counter(merged.size(), 0);
      for (int64_t r = 0; r < runs_here; ++r) {
        StridedRun one = base;
        for (size_t k = 1; k < merged.size(); ++k) {
          one.src_offset += counter[k] * merged[k].src;
          one.dst_offset += counter[k] * merged[k].dst;
        }
        out.push_back(one);
        for (size_t k = 1; k < merged.size(); ++k) {
          if (++counter[k] < merged[k].count) break;
          counter[k] = 0;
        }
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const StridedRun& a, const StridedRun& b) { return a.dst_offset < b.dst_offset; });
  // Flat pieces split contiguous ranges: join single runs that continue
  // each other on both sides.
  std::vector<StridedRun> joined;
  joined.reserve(out.size());
  for (const StridedRun& r : out) {
    if (!joined.empty()) {
      StridedRun& p = joined.back();
      if (p.count == 1 && r.count == 1 && p.src_offset + p.length == r.src_offset &&
          p.dst_offset + p.length == r.dst_offset) {
        p.length += r.length;
        continue;
      }
    }
    joined.push_back(r);
  }
  for (StridedRun& r : joined) {
    r.src_offset *= element_size;
    r.dst_offset *= element_size;
    r.length *= element_size;
    r.src_stride *= element_size;
    r.dst_stride *= element_size;
  }
  return joined;
}

absl::StatusOr<int64_t> StridedRunCount(const Shape& shape, const Region& stored,
                                        const Region& requested) {
  if (absl::Status s = ValidateRegion(shape, stored); !s.ok()) return s;
  if (absl::Status s = ValidateRegion(shape, requested); !s.ok()) return s;
  const Pieces src = RegionPieces(shape, stored);
  const Pieces dst = RegionPieces(shape, requested);
  int64_t total = 0;
  Ints off, len;
  for (const Piece& ps : src.pieces) {
    for (const Piece& pd : dst.pieces) {
      if (!IntersectBoxes(ps, pd, &off, &len)) continue;
      int64_t runs = 0;
      if (!PairRuns(PairCopyShape(ps, pd, len), &runs) ||
          __builtin_add_overflow(total, runs, &total)) {
        return std::numeric_limits<int64_t>::max();
      }
    }
  }
  return total;
}

namespace {

// Expands strided runs into contiguous ones, sorted by dst and coalesced.
absl::StatusOr<std::vector<ByteRun>> Expand(const std::vector<StridedRun>& runs, int64_t max_runs,
                                            const Shape& shape, const Region& stored,
                                            const Region& requested) {
  int64_t total = 0;
  for (const StridedRun& r : runs) {
    if (__builtin_add_overflow(total, r.count, &total) || total > max_runs) {
      return TooManyRuns(shape, stored, requested, absl::StrCat("more than ", max_runs), max_runs);
    }
  }
  std::vector<ByteRun> out;
  out.reserve(static_cast<size_t>(total));
  for (const StridedRun& r : runs) {
    for (int64_t k = 0; k < r.count; ++k) {
      out.push_back(
          ByteRun{r.src_offset + k * r.src_stride, r.dst_offset + k * r.dst_stride, r.length});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ByteRun& a, const ByteRun& b) { return a.dst_offset < b.dst_offset; });
  std::vector<ByteRun> joined;
  joined.reserve(out.size());
  for (const ByteRun& r : out) {
    if (!joined.empty() && joined.back().src_offset + joined.back().length == r.src_offset &&
        joined.back().dst_offset + joined.back().length == r.dst_offset) {
      joined.back().length += r.length;
    } else {
      joined.push_back(r);
    }
  }
  return joined;
}

}  // namespace

absl::StatusOr<std::vector<ElementRun>> RegionRuns(const Shape& shape, const Region& region,
                                                   int64_t max_runs) {
  if (absl::Status s = ValidateRegion(shape, region); !s.ok()) return s;
  // The region copied into the whole tensor: dst offsets are global indices.
  absl::StatusOr<std::vector<StridedRun>> strided =
      IntersectRegionsStrided(shape, 1, region, Region::Whole(), max_runs);
  if (!strided.ok()) return strided.status();
  absl::StatusOr<std::vector<ByteRun>> runs =
      Expand(*strided, max_runs, shape, region, Region::Whole());
  if (!runs.ok()) return runs.status();
  std::vector<ElementRun> out;
  out.reserve(runs->size());
  for (const ByteRun& r : *runs) out.push_back(ElementRun{r.dst_offset, r.length});
  return out;
}

absl::StatusOr<std::vector<ByteRun>> IntersectRegions(const Shape& shape, int64_t element_size,
                                                      const Region& stored, const Region& requested,
                                                      int64_t max_runs) {
  absl::StatusOr<std::vector<StridedRun>> strided =
      IntersectRegionsStrided(shape, element_size, stored, requested, max_runs);
  if (!strided.ok()) return strided.status();
  return Expand(*strided, max_runs, shape, stored, requested);
}

absl::StatusOr<int64_t> CommonElements(const Shape& shape, const Region& a, const Region& b) {
  if (absl::Status s = ValidateRegion(shape, a); !s.ok()) return s;
  if (absl::Status s = ValidateRegion(shape, b); !s.ok()) return s;
  return CommonElementsOfPieces(RegionPieces(shape, a), RegionPieces(shape, b));
}

absl::StatusOr<bool> SameElements(const Shape& shape, const Region& a, const Region& b) {
  absl::StatusOr<int64_t> na = RegionNumElements(shape, a);
  if (!na.ok()) return na.status();
  absl::StatusOr<int64_t> nb = RegionNumElements(shape, b);
  if (!nb.ok()) return nb.status();
  if (*na != *nb) return false;
  absl::StatusOr<int64_t> common = CommonElements(shape, a, b);
  if (!common.ok()) return common.status();
  return *common == *na;
}

absl::StatusOr<bool> Overlaps(const Shape& shape, const Region& a, const Region& b) {
  absl::StatusOr<int64_t> common = CommonElements(shape, a, b);
  if (!common.ok()) return common.status();
  return *common > 0;
}

}  // namespace ckpt::geo
