#include "proto/lib/geometry.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/catch.h"

namespace Catch {
template <>
struct StringMaker<ckpt::geo::ElementRun> {
  static std::string convert(const ckpt::geo::ElementRun& r) {
    return "{" + std::to_string(r.begin) + "+" + std::to_string(r.length) + "}";
  }
};
template <>
struct StringMaker<ckpt::geo::StridedRun> {
  static std::string convert(const ckpt::geo::StridedRun& r) {
    return "{src=" + std::to_string(r.src_offset) + ",dst=" + std::to_string(r.dst_offset) +
           ",len=" + std::to_string(r.length) + ",count=" + std::to_string(r.count) +
           ",strides=" + std::to_string(r.src_stride) + "/" + std::to_string(r.dst_stride) + "}";
  }
};
template <>
struct StringMaker<ckpt::geo::ByteRun> {
  static std::string convert(const ckpt::geo::ByteRun& r) {
    return "{src=" + std::to_string(r.src_offset) + ",dst=" + std::to_string(r.dst_offset) +
           ",len=" + std::to_string(r.length) + "}";
  }
};
}  // namespace Catch

namespace ckpt::geo {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// ---------------------------------------------------------------------------
// Naive reference, written from the definitions without the library: walk
// every global element index, decide membership, count packed positions.

int64_t NaiveNumel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Contains(const Shape& shape, const Region& region, int64_t g) {
  switch (region.kind) {
    case Region::Kind::kWhole:
      return true;
    case Region::Kind::kFlat:
      return region.flat_begin <= g && g < region.flat_end;
    case Region::Kind::kBox:
      for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
        const int64_t i = g % shape[d];
        g /= shape[d];
        if (i < region.offsets[d] || i >= region.offsets[d] + region.lengths[d]) {
          return false;
        }
      }
      return true;
  }
  return false;
}

std::vector<ElementRun> NaiveRuns(const Shape& shape, const Region& region) {
  std::vector<ElementRun> runs;
  const int64_t n = NaiveNumel(shape);
  for (int64_t g = 0; g < n; ++g) {
    if (!Contains(shape, region, g)) continue;
    if (!runs.empty() && runs.back().begin + runs.back().length == g) {
      ++runs.back().length;
    } else {
      runs.push_back({g, 1});
    }
  }
  return runs;
}

// A byte that depends on the element and the byte within it, so that a copy
// from the wrong element or the wrong byte shows.
uint8_t Pattern(int64_t g, int64_t b) {
  return static_cast<uint8_t>(g * 7 + b * 13 + (g >> 8) * 31 + 1);
}

// The packed bytes of `region`, taken from a tensor filled with Pattern.
std::vector<uint8_t> NaivePacked(const Shape& shape, int64_t es, const Region& region) {
  std::vector<uint8_t> out;
  const int64_t n = NaiveNumel(shape);
  for (int64_t g = 0; g < n; ++g) {
    if (!Contains(shape, region, g)) continue;
    for (int64_t b = 0; b < es; ++b) out.push_back(Pattern(g, b));
  }
  return out;
}

// Sorted by dst, lengths and offsets whole elements, no overlap on either
// side, and no two neighbours that could have been merged.
void CheckWellFormed(const std::vector<ByteRun>& runs, int64_t es) {
  for (size_t k = 0; k < runs.size(); ++k) {
    INFO("run " << k);
    REQUIRE(runs[k].length > 0);
    REQUIRE(runs[k].length % es == 0);
    REQUIRE(runs[k].src_offset % es == 0);
    REQUIRE(runs[k].dst_offset % es == 0);
    REQUIRE(runs[k].src_offset >= 0);
    REQUIRE(runs[k].dst_offset >= 0);
    if (k == 0) continue;
    const ByteRun& p = runs[k - 1];
    REQUIRE(p.dst_offset + p.length <= runs[k].dst_offset);
    REQUIRE_FALSE((p.src_offset + p.length == runs[k].src_offset &&
                   p.dst_offset + p.length == runs[k].dst_offset));
  }
  std::vector<ByteRun> by_src = runs;
  std::sort(by_src.begin(), by_src.end(),
            [](const ByteRun& a, const ByteRun& b) { return a.src_offset < b.src_offset; });
  for (size_t k = 1; k < by_src.size(); ++k) {
    REQUIRE(by_src[k - 1].src_offset + by_src[k - 1].length <= by_src[k].src_offset);
  }
}

// Copies stored -> requested with the library's runs and compares against
// the reference, byte for byte, including which bytes were written at all.
void CheckIntersection(const Shape& shape, int64_t es, const Region& stored,
                       const Region& requested) {
  INFO("shape size " << shape.size() << " es " << es << " stored " << stored.DebugString()
                     << " requested " << requested.DebugString());
  const std::vector<uint8_t> src = NaivePacked(shape, es, stored);
  std::vector<uint8_t> expected;
  std::vector<bool> expected_written;
  const int64_t n = NaiveNumel(shape);
  for (int64_t g = 0; g < n; ++g) {
    if (!Contains(shape, requested, g)) continue;
    const bool in_both = Contains(shape, stored, g);
    for (int64_t b = 0; b < es; ++b) {
      expected.push_back(in_both ? Pattern(g, b) : 0xEE);
      expected_written.push_back(in_both);
    }
  }

  absl::StatusOr<std::vector<ByteRun>> runs = IntersectRegions(shape, es, stored, requested);
  REQUIRE(runs.ok());
  CheckWellFormed(*runs, es);

  std::vector<uint8_t> dst(expected.size(), 0xEE);
  std::vector<int> writes(expected.size(), 0);
  for (const ByteRun& r : *runs) {
    REQUIRE(r.src_offset + r.length <= static_cast<int64_t>(src.size()));
    REQUIRE(r.dst_offset + r.length <= static_cast<int64_t>(dst.size()));
    for (int64_t k = 0; k < r.length; ++k) {
      dst[r.dst_offset + k] = src[r.src_offset + k];
      ++writes[r.dst_offset + k];
    }
  }
  int64_t bad_writes = 0;
  for (size_t k = 0; k < writes.size(); ++k) {
    if (writes[k] != (expected_written[k] ? 1 : 0)) ++bad_writes;
  }
  CHECK(bad_writes == 0);
  CHECK(dst == expected);
}

// ---------------------------------------------------------------------------
// Random generation for the property tests.

Shape RandomShape(std::mt19937_64& rng) {
  const int rank = static_cast<int>(rng() % 6);
  const int64_t max_dim = rank <= 2 ? 9 : 4;
  Shape shape(rank);
  for (int64_t& d : shape) {
    d = rng() % 12 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % max_dim);
  }
  return shape;
}

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

Region RandomRegion(std::mt19937_64& rng, const Shape& shape) {
  switch (rng() % 5) {
    case 0:
      return Region::Whole();
    case 1:
    case 2: {
      Ints offsets, lengths;
      for (int64_t d : shape) {
        // Full dimensions are common in practice and exercise run collapse.
        if (rng() % 3 == 0) {
          offsets.push_back(0);
          lengths.push_back(d);
        } else {
          const int64_t o = Uniform(rng, 0, d);
          offsets.push_back(o);
          lengths.push_back(Uniform(rng, 0, d - o));
        }
      }
      return Region::Box(offsets, lengths);
    }
    default: {
      const int64_t n = NaiveNumel(shape);
      int64_t a = Uniform(rng, 0, n), b = Uniform(rng, 0, n);
      if (a > b) std::swap(a, b);
      return Region::Flat(a, b);
    }
  }
}

// A region likely to share run structure with `base`, so that coalescing
// across gaps (both packed sides contiguous) actually happens: the same
// region, or a box trimmed only in its leading dimension.
Region RelatedRegion(std::mt19937_64& rng, const Shape& shape, const Region& base) {
  if (base.kind != Region::Kind::kBox || shape.empty() || rng() % 3 == 0) return base;
  Region r = base;
  const int64_t o = Uniform(rng, base.offsets[0], base.offsets[0] + base.lengths[0]);
  r.offsets[0] = o;
  r.lengths[0] = Uniform(rng, 0, base.offsets[0] + base.lengths[0] - o);
  return r;
}

int64_t RandomElementSize(std::mt19937_64& rng) {
  static constexpr int64_t kSizes[] = {1, 2, 4, 8};
  return kSizes[rng() % 4];
}

// Sorted cut points 0 = c0 <= c1 <= ... <= ck = n (duplicates give empty
// shards, which must be harmless).
std::vector<int64_t> RandomCuts(std::mt19937_64& rng, int64_t n) {
  std::vector<int64_t> cuts = {0, n};
  const int extra = static_cast<int>(rng() % 5);
  for (int k = 0; k < extra; ++k) cuts.push_back(Uniform(rng, 0, n));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// ---------------------------------------------------------------------------

TEST_CASE("NumElements and NumBytes", "[geometry]") {
  CHECK(*NumElements({}) == 1);
  CHECK(*NumElements({0}) == 0);
  CHECK(*NumElements({3, 0, 5}) == 0);
  CHECK(*NumElements({2, 3, 4}) == 24);
  CHECK(*NumElements({kMax}) == kMax);
  CHECK(*NumElements({kMax, 1, 1}) == kMax);
  // No elements at all, even though 2^32 * 2^32 alone would overflow.
  CHECK(*NumElements({int64_t{1} << 32, int64_t{1} << 32, 0}) == 0);

  CHECK(*NumBytes({}, 4) == 4);
  CHECK(*NumBytes({2, 3}, 8) == 48);
  CHECK(*NumBytes({0, 5}, 8) == 0);
  CHECK(*NumBytes({int64_t{1} << 61}, 2) == int64_t{1} << 62);
  CHECK(ValidateShape({}).ok());
  CHECK(ValidateShape({0, 7}).ok());
}

TEST_CASE("shape errors: negative dims and overflow", "[geometry]") {
  absl::Status s = ValidateShape({3, -1});
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()),
             Catch::Contains("negative dimension 1") && Catch::Contains("[3, -1]"));

  absl::StatusOr<int64_t> n = NumElements({int64_t{1} << 32, int64_t{1} << 32});
  REQUIRE_FALSE(n.ok());
  CHECK(n.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(n.status().message()),
             Catch::Contains("shape [4294967296, 4294967296] has more than 2^63-1 elements"));
  CHECK_FALSE(ValidateShape({int64_t{1} << 32, int64_t{1} << 32}).ok());
  // Exactly 2^63: one past the largest representable count.
  CHECK_FALSE(NumElements({int64_t{1} << 31, int64_t{1} << 32}).ok());
  CHECK_FALSE(NumElements({kMax, 2}).ok());
  CHECK_FALSE(NumElements({2, kMax}).ok());
  // A negative dimension is rejected even when another dimension is zero.
  CHECK_FALSE(NumElements({0, -2}).ok());

  absl::StatusOr<int64_t> b = NumBytes({int64_t{1} << 61}, 8);
  REQUIRE_FALSE(b.ok());
  CHECK(b.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(b.status().message()),
             Catch::Contains("[2305843009213693952]") && Catch::Contains("more than 2^63-1 bytes"));
  CHECK_FALSE(NumBytes({int64_t{1} << 61}, 4).ok());
  CHECK_FALSE(NumBytes({kMax}, 2).ok());
  CHECK_FALSE(NumBytes({int64_t{1} << 32, int64_t{1} << 32}, 1).ok());
  CHECK_FALSE(NumBytes({4}, 0).ok());
  CHECK_FALSE(NumBytes({4}, -8).ok());
}

TEST_CASE("Region constructors and DebugString", "[geometry]") {
  Region def;
  CHECK(def.kind == Region::Kind::kWhole);
  CHECK(Region::Whole().kind == Region::Kind::kWhole);
  CHECK(Region::Whole().DebugString() == "whole");

  Region box = Region::Box({0, 4}, {2, 4});
  CHECK(box.kind == Region::Kind::kBox);
  CHECK(box.offsets == Ints{0, 4});
  CHECK(box.lengths == Ints{2, 4});
  CHECK(box.DebugString() == "box{offsets=[0,4],lengths=[2,4]}");
  CHECK(Region::Box({}, {}).DebugString() == "box{offsets=[],lengths=[]}");

  Region flat = Region::Flat(3, 17);
  CHECK(flat.kind == Region::Kind::kFlat);
  CHECK(flat.flat_begin == 3);
  CHECK(flat.flat_end == 17);
  CHECK(flat.DebugString() == "flat[3,17)");
}

TEST_CASE("ValidateRegion accepts regions inside the shape", "[geometry]") {
  CHECK(ValidateRegion({}, Region::Whole()).ok());
  CHECK(ValidateRegion({}, Region::Box({}, {})).ok());
  CHECK(ValidateRegion({}, Region::Flat(0, 1)).ok());
  CHECK(ValidateRegion({}, Region::Flat(1, 1)).ok());
  CHECK(ValidateRegion({8, 4}, Region::Box({0, 0}, {8, 4})).ok());
  CHECK(ValidateRegion({8, 4}, Region::Box({8, 4}, {0, 0})).ok());
  CHECK(ValidateRegion({8, 4}, Region::Flat(32, 32)).ok());
  CHECK(ValidateRegion({3, 0}, Region::Whole()).ok());
  CHECK(ValidateRegion({3, 0}, Region::Box({1, 0}, {2, 0})).ok());
  CHECK(ValidateRegion({kMax}, Region::Box({kMax - 1}, {1})).ok());
  CHECK(ValidateRegion({kMax}, Region::Flat(kMax, kMax)).ok());
}

TEST_CASE("ValidateRegion rejects bad regions with a precise message", "[geometry]") {
  auto message = [](const Shape& shape, const Region& r) {
    absl::Status s = ValidateRegion(shape, r);
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  CHECK_THAT(message({8, 4}, Region::Box({5, 0}, {4, 4})),
             Catch::Contains("region box offset 5 + length 4 exceeds dimension 0 of size 8") &&
                 Catch::Contains("box{offsets=[5,0],lengths=[4,4]}") && Catch::Contains("[8, 4]"));
  CHECK_THAT(message({8, 4}, Region::Box({0, 1}, {8, 4})),
             Catch::Contains("offset 1 + length 4 exceeds dimension 1 of size 4"));
  CHECK_THAT(message({8, 4}, Region::Box({-1, 0}, {1, 1})),
             Catch::Contains("offset -1 in dimension 0 is negative"));
  CHECK_THAT(message({8, 4}, Region::Box({0, 0}, {1, -1})),
             Catch::Contains("length -1 in dimension 1 is negative"));
  CHECK_THAT(message({8, 4, 2}, Region::Box({0, 0}, {1, 1})),
             Catch::Contains("2 offsets and 2 lengths but the shape has rank 3"));
  CHECK_THAT(message({8, 4}, Region::Box({0, 0}, {1, 1, 1})),
             Catch::Contains("2 offsets and 3 lengths"));
  CHECK_THAT(message({}, Region::Box({0}, {1})), Catch::Contains("rank 0"));
  // offset + length overflows int64: must be an error, not a wrap-around.
  CHECK_THAT(message({kMax}, Region::Box({kMax}, {1})), Catch::Contains("exceeds dimension 0"));
  CHECK_THAT(message({kMax}, Region::Box({1}, {kMax})), Catch::Contains("exceeds dimension 0"));

  CHECK_THAT(
      message({8, 4}, Region::Flat(0, 33)),
      Catch::Contains("flat end 33 exceeds the 32 elements") && Catch::Contains("flat[0,33)"));
  CHECK_THAT(message({8, 4}, Region::Flat(5, 3)),
             Catch::Contains("flat begin 5 is after its end 3"));
  CHECK_THAT(message({8, 4}, Region::Flat(-1, 3)), Catch::Contains("flat begin -1 is negative"));
  CHECK_THAT(message({}, Region::Flat(0, 2)), Catch::Contains("exceeds the 1 elements"));
  CHECK_THAT(message({3, 0}, Region::Flat(0, 1)), Catch::Contains("exceeds the 0 elements"));

  // A bad shape fails every region kind, whole included.
  const Shape huge = {int64_t{1} << 32, int64_t{1} << 32};
  CHECK_THAT(message(huge, Region::Whole()), Catch::Contains("more than 2^63-1 elements"));
  CHECK_FALSE(ValidateRegion(huge, Region::Box({0, 0}, {1, 1})).ok());
  CHECK_FALSE(ValidateRegion(huge, Region::Flat(0, 1)).ok());
  CHECK_FALSE(ValidateRegion({-1}, Region::Whole()).ok());

  // Every entry point validates.
  CHECK_FALSE(RegionNumElements({8}, Region::Flat(0, 9)).ok());
  CHECK_FALSE(RegionRuns({8}, Region::Box({7}, {2})).ok());
  CHECK_FALSE(SameElements({8}, Region::Whole(), Region::Flat(2, 1)).ok());
  CHECK_FALSE(Overlaps({8}, Region::Box({0, 0}, {1, 1}), Region::Whole()).ok());
}

TEST_CASE("RegionNumElements", "[geometry]") {
  CHECK(*RegionNumElements({}, Region::Whole()) == 1);
  CHECK(*RegionNumElements({}, Region::Box({}, {})) == 1);
  CHECK(*RegionNumElements({}, Region::Flat(1, 1)) == 0);
  CHECK(*RegionNumElements({8, 4}, Region::Whole()) == 32);
  CHECK(*RegionNumElements({8, 4}, Region::Box({1, 1}, {3, 2})) == 6);
  CHECK(*RegionNumElements({8, 4}, Region::Box({1, 1}, {0, 2})) == 0);
  CHECK(*RegionNumElements({8, 4}, Region::Flat(3, 17)) == 14);
  CHECK(*RegionNumElements({3, 0}, Region::Whole()) == 0);
  const int64_t m = kMax / 2;
  CHECK(*RegionNumElements({m, 2}, Region::Whole()) == 2 * m);
  CHECK(*RegionNumElements({m, 2}, Region::Box({m - 3, 0}, {3, 2})) == 6);
}

TEST_CASE("RegionRuns: 0-d, zero-size and small shapes", "[geometry]") {
  using Runs = std::vector<ElementRun>;
  CHECK(*RegionRuns({}, Region::Whole()) == Runs{{0, 1}});
  CHECK(*RegionRuns({}, Region::Box({}, {})) == Runs{{0, 1}});
  CHECK(*RegionRuns({}, Region::Flat(0, 1)) == Runs{{0, 1}});
  CHECK(RegionRuns({}, Region::Flat(0, 0))->empty());
  CHECK(RegionRuns({}, Region::Flat(1, 1))->empty());

  CHECK(RegionRuns({3, 0, 4}, Region::Whole())->empty());
  CHECK(RegionRuns({3, 0, 4}, Region::Box({0, 0, 0}, {3, 0, 4}))->empty());
  CHECK(RegionRuns({3, 0, 4}, Region::Flat(0, 0))->empty());
  CHECK(RegionRuns({0}, Region::Whole())->empty());

  CHECK(*RegionRuns({10}, Region::Box({3}, {4})) == Runs{{3, 4}});
  CHECK(*RegionRuns({10}, Region::Flat(2, 9)) == Runs{{2, 7}});
  CHECK(*RegionRuns({10}, Region::Whole()) == Runs{{0, 10}});
  CHECK(RegionRuns({10}, Region::Flat(4, 4))->empty());

  CHECK(*RegionRuns({4, 6}, Region::Box({1, 2}, {2, 3})) == Runs{{8, 3}, {14, 3}});
  // Full trailing dimension: the rows merge into one run.
  CHECK(*RegionRuns({4, 6}, Region::Box({1, 0}, {2, 6})) == Runs{{6, 12}});
  CHECK(*RegionRuns({4, 6}, Region::Box({0, 0}, {4, 6})) == Runs{{0, 24}});
  // A zero length anywhere empties the box.
  CHECK(RegionRuns({4, 6}, Region::Box({1, 2}, {0, 3}))->empty());
  CHECK(RegionRuns({4, 6}, Region::Box({1, 2}, {2, 0}))->empty());

  CHECK(*RegionRuns({2, 3, 4}, Region::Box({0, 1, 0}, {2, 2, 4})) == Runs{{4, 8}, {16, 8}});
  CHECK(*RegionRuns({2, 3, 4}, Region::Box({1, 0, 0}, {1, 3, 4})) == Runs{{12, 12}});
  CHECK(*RegionRuns({2, 3, 4}, Region::Box({1, 2, 1}, {1, 1, 2})) == Runs{{21, 2}});
  // Leading size-1 dims and a partial middle dim.
  CHECK(*RegionRuns({1, 1, 5, 2}, Region::Box({0, 0, 1, 0}, {1, 1, 3, 2})) == Runs{{2, 6}});
}

TEST_CASE("RegionRuns: 8-d shape", "[geometry]") {
  const Shape shape = {2, 3, 2, 2, 2, 2, 3, 2};
  const Region box = Region::Box({1, 1, 0, 0, 0, 0, 1, 0}, {1, 2, 2, 2, 2, 2, 1, 2});
  absl::StatusOr<std::vector<ElementRun>> runs = RegionRuns(shape, box);
  REQUIRE(runs.ok());
  // Dim 7 is full, dim 6 partial: runs of 2 elements, one per index of
  // dims 0..5 inside the box (1*2*2*2*2*2).
  REQUIRE(runs->size() == 32);
  for (const ElementRun& r : *runs) CHECK(r.length == 2);
  CHECK(*runs == NaiveRuns(shape, box));
  CHECK(*RegionNumElements(shape, box) == 64);

  const Region all = Region::Box({0, 0, 0, 0, 0, 0, 0, 0}, {2, 3, 2, 2, 2, 2, 3, 2});
  CHECK(*RegionRuns(shape, all) == std::vector<ElementRun>{{0, 576}});
  CHECK(*SameElements(shape, all, Region::Whole()));
  CheckIntersection(shape, 4, box, Region::Flat(100, 500));
  CheckIntersection(shape, 2, Region::Flat(37, 411), box);
}

TEST_CASE("RegionRuns: dims near 2^63 never enumerate elements", "[geometry]") {
  using Runs = std::vector<ElementRun>;
  const int64_t m = kMax / 2;  // 2^62 - 1, so the shape below has 2^63 - 2 elements
  const Shape shape = {m, 1, 1, 1, 1, 1, 1, 2};
  const auto start = std::chrono::steady_clock::now();

  CHECK(*RegionRuns(shape, Region::Whole()) == Runs{{0, 2 * m}});
  CHECK(*RegionRuns(shape, Region::Box({m - 3, 0, 0, 0, 0, 0, 0, 1}, {2, 1, 1, 1, 1, 1, 1, 1})) ==
        Runs{{(m - 3) * 2 + 1, 1}, {(m - 2) * 2 + 1, 1}});
  CHECK(*RegionRuns(shape, Region::Box({m - 3, 0, 0, 0, 0, 0, 0, 0}, {3, 1, 1, 1, 1, 1, 1, 2})) ==
        Runs{{(m - 3) * 2, 6}});
  CHECK(*RegionRuns(shape, Region::Box({0, 0, 0, 0, 0, 0, 0, 0}, {m, 1, 1, 1, 1, 1, 1, 2})) ==
        Runs{{0, 2 * m}});
  CHECK(*RegionRuns(shape, Region::Flat(2 * m - 5, 2 * m)) == Runs{{2 * m - 5, 5}});

  // 2^60 elements: whole slabs collapse to a single run.
  const int64_t k = int64_t{1} << 20;
  CHECK(*RegionRuns({k, k, k}, Region::Box({5, 0, 0}, {3, k, k})) == Runs{{5 * k * k, 3 * k * k}});
  CHECK(*RegionRuns({k, k, k}, Region::Box({5, 7, 0}, {2, 3, k})) ==
        Runs{{5 * k * k + 7 * k, 3 * k}, {6 * k * k + 7 * k, 3 * k}});

  CHECK(*RegionRuns({kMax}, Region::Box({kMax - 5}, {5})) == Runs{{kMax - 5, 5}});
  CHECK(*SameElements({kMax}, Region::Box({kMax - 5}, {5}), Region::Flat(kMax - 5, kMax)));

  // Stored and requested shards are small even though the tensor's byte
  // count (2^63 - 2 elements * 8 bytes) does not fit.
  const Region tail_box = Region::Box({m - 3, 0, 0, 0, 0, 0, 0, 0}, {3, 1, 1, 1, 1, 1, 1, 2});
  CHECK(*IntersectRegions(shape, 8, tail_box, Region::Flat(2 * m - 5, 2 * m - 2)) ==
        std::vector<ByteRun>{{8, 0, 24}});
  CHECK(*IntersectRegions(shape, 8, Region::Flat(2 * m - 4, 2 * m), tail_box) ==
        std::vector<ByteRun>{{0, 16, 32}});
  // With one-byte elements the whole tensor fits, and src offsets are huge.
  CHECK(*IntersectRegions(shape, 1, Region::Whole(), tail_box) ==
        std::vector<ByteRun>{{(m - 3) * 2, 0, 6}});
  CHECK(*Overlaps(shape, tail_box, Region::Flat(2 * m - 1, 2 * m)));
  CHECK_FALSE(*Overlaps(shape, tail_box, Region::Flat(0, 2 * m - 6)));

  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed < std::chrono::seconds(1));
}

TEST_CASE("IntersectRegions: byte count overflow is reported per shard", "[geometry]") {
  const int64_t m = kMax / 2;
  const Shape shape = {m, 1, 1, 1, 1, 1, 1, 2};
  const Region tail = Region::Flat(2 * m - 4, 2 * m);
  absl::StatusOr<std::vector<ByteRun>> r = IntersectRegions(shape, 8, tail, Region::Whole());
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(r.status().message()),
             Catch::StartsWith("requested") && Catch::Contains("more than 2^63-1 bytes"));
  r = IntersectRegions(shape, 2, Region::Whole(), tail);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::StartsWith("stored"));
  CHECK_FALSE(IntersectRegions({int64_t{1} << 61}, 8, Region::Whole(), Region::Flat(0, 1)).ok());
  CHECK(IntersectRegions({int64_t{1} << 61}, 8, Region::Flat(0, 1), Region::Flat(0, 1)).ok());
}

TEST_CASE("IntersectRegions: hand-written cases", "[geometry]") {
  using Runs = std::vector<ByteRun>;
  const Shape s46 = {4, 6};

  SECTION("box vs box") {
    // Rows 0-1 stored; rows 1-2, cols 2-4 requested: only row 1 overlaps.
    CHECK(*IntersectRegions(s46, 4, Region::Box({0, 0}, {2, 6}), Region::Box({1, 2}, {2, 3})) ==
          Runs{{32, 0, 12}});
    // Two row pieces of the requested box, not contiguous in the source.
    CHECK(*IntersectRegions(s46, 1, Region::Box({0, 1}, {4, 3}), Region::Box({1, 2}, {2, 3})) ==
          Runs{{4, 0, 2}, {7, 3, 2}});
  }
  SECTION("box vs flat: FSDP cuts mid-row") {
    // Flat [5, 15) cuts rows 0 and 2; requested rows 1-2 (elements 6..17).
    CHECK(*IntersectRegions(s46, 2, Region::Flat(5, 15), Region::Box({1, 0}, {2, 6})) ==
          Runs{{2, 0, 18}});
    // Columns 2-3 of every row: elements 2,3 | 8,9 | 14,15 | 20,21. Only
    // 8, 9 and 14 are stored; dst is contiguous across them but src is not.
    CHECK(*IntersectRegions(s46, 1, Region::Flat(5, 15), Region::Box({0, 2}, {4, 2})) ==
          Runs{{3, 2, 2}, {9, 4, 1}});
    // The other direction.
    CHECK(*IntersectRegions(s46, 1, Region::Box({0, 2}, {4, 2}), Region::Flat(5, 15)) ==
          Runs{{2, 3, 2}, {4, 9, 1}});
  }
  SECTION("flat vs flat") {
    CHECK(*IntersectRegions({10}, 8, Region::Flat(2, 7), Region::Flat(5, 9)) == Runs{{24, 0, 16}});
    CHECK(*IntersectRegions({10}, 8, Region::Flat(5, 9), Region::Flat(2, 7)) == Runs{{0, 24, 16}});
    CHECK(*IntersectRegions({10}, 4, Region::Flat(0, 10), Region::Flat(3, 4)) == Runs{{12, 0, 4}});
  }
  SECTION("whole") {
    CHECK(*IntersectRegions(s46, 1, Region::Whole(), Region::Box({1, 2}, {2, 3})) ==
          Runs{{8, 0, 3}, {14, 3, 3}});
    CHECK(*IntersectRegions(s46, 1, Region::Box({1, 2}, {2, 3}), Region::Whole()) ==
          Runs{{0, 8, 3}, {3, 14, 3}});
    CHECK(*IntersectRegions(s46, 2, Region::Whole(), Region::Whole()) == Runs{{0, 0, 48}});
    CHECK(*IntersectRegions(s46, 2, Region::Box({0, 0}, {4, 6}), Region::Flat(0, 24)) ==
          Runs{{0, 0, 48}});
  }
  SECTION("no overlap") {
    CHECK(IntersectRegions(s46, 4, Region::Box({0, 0}, {2, 6}), Region::Box({2, 0}, {2, 6}))
              ->empty());
    CHECK(IntersectRegions(s46, 4, Region::Flat(0, 5), Region::Flat(5, 10))->empty());
    CHECK(IntersectRegions(s46, 4, Region::Box({0, 0}, {4, 3}), Region::Box({0, 3}, {4, 3}))
              ->empty());
    CHECK(IntersectRegions(s46, 4, Region::Whole(), Region::Flat(7, 7))->empty());
    CHECK(IntersectRegions(s46, 4, Region::Box({1, 1}, {0, 3}), Region::Whole())->empty());
  }
  SECTION("coalescing") {
    // Columns 2-4 stored, rows 1-2 of those columns requested: the global
    // elements have a gap, but both packed sides are contiguous -> one run.
    CHECK(*IntersectRegions(s46, 2, Region::Box({0, 2}, {4, 3}), Region::Box({1, 2}, {2, 3})) ==
          Runs{{6, 0, 12}});
    // Identical many-run regions copy in one piece.
    CHECK(*IntersectRegions(s46, 4, Region::Box({0, 1}, {4, 2}), Region::Box({0, 1}, {4, 2})) ==
          Runs{{0, 0, 32}});
    // dst contiguous, src not: rows 1-2 stored whole, columns 0-2 requested.
    CHECK(*IntersectRegions(s46, 1, Region::Flat(6, 18), Region::Box({1, 0}, {2, 3})) ==
          Runs{{0, 0, 3}, {6, 3, 3}});
    // src contiguous, dst not.
    CHECK(*IntersectRegions(s46, 1, Region::Box({1, 0}, {2, 3}), Region::Flat(6, 18)) ==
          Runs{{0, 0, 3}, {3, 6, 3}});
  }
  SECTION("0-d and zero-size tensors") {
    CHECK(*IntersectRegions({}, 4, Region::Whole(), Region::Whole()) == Runs{{0, 0, 4}});
    CHECK(*IntersectRegions({}, 4, Region::Box({}, {}), Region::Flat(0, 1)) == Runs{{0, 0, 4}});
    CHECK(IntersectRegions({}, 4, Region::Whole(), Region::Flat(0, 0))->empty());
    CHECK(IntersectRegions({3, 0}, 4, Region::Whole(), Region::Whole())->empty());
    CHECK(IntersectRegions({0}, 1, Region::Flat(0, 0), Region::Box({0}, {0}))->empty());
  }
  SECTION("errors") {
    absl::StatusOr<Runs> r = IntersectRegions(s46, 4, Region::Box({3, 0}, {2, 6}), Region::Whole());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.status().message()),
               Catch::StartsWith("stored") &&
                   Catch::Contains("offset 3 + length 2 exceeds dimension 0 of size 4"));
    r = IntersectRegions(s46, 4, Region::Whole(), Region::Flat(0, 25));
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(std::string(r.status().message()), Catch::StartsWith("requested"));
    CHECK_FALSE(IntersectRegions(s46, 0, Region::Whole(), Region::Whole()).ok());
    CHECK_FALSE(IntersectRegions(s46, -4, Region::Whole(), Region::Whole()).ok());
    CHECK_FALSE(IntersectRegions({-1}, 4, Region::Whole(), Region::Whole()).ok());
  }
}

TEST_CASE("IntersectRegions: hand-written cases against the reference", "[geometry]") {
  CheckIntersection({4, 6}, 4, Region::Flat(5, 15), Region::Box({0, 2}, {4, 2}));
  CheckIntersection({4, 6}, 8, Region::Box({1, 1}, {3, 4}), Region::Box({0, 2}, {3, 4}));
  CheckIntersection({3, 4, 5}, 2, Region::Box({0, 1, 1}, {3, 2, 3}), Region::Flat(7, 51));
  CheckIntersection({3, 4, 5}, 1, Region::Flat(13, 29), Region::Flat(20, 60));
  CheckIntersection({}, 8, Region::Whole(), Region::Box({}, {}));
  CheckIntersection({5, 0, 2}, 4, Region::Whole(), Region::Whole());
}

TEST_CASE("SameElements and Overlaps", "[geometry]") {
  const Shape s46 = {4, 6};
  CHECK(*SameElements(s46, Region::Whole(), Region::Box({0, 0}, {4, 6})));
  CHECK(*SameElements(s46, Region::Whole(), Region::Flat(0, 24)));
  CHECK(*SameElements(s46, Region::Box({1, 0}, {2, 6}), Region::Flat(6, 18)));
  CHECK_FALSE(*SameElements(s46, Region::Box({1, 0}, {2, 5}), Region::Flat(6, 18)));
  CHECK_FALSE(*SameElements(s46, Region::Whole(), Region::Flat(0, 23)));
  // Two empty regions cover the same (no) elements.
  CHECK(*SameElements(s46, Region::Box({1, 1}, {0, 3}), Region::Flat(4, 4)));
  CHECK(*SameElements({}, Region::Whole(), Region::Flat(0, 1)));

  CHECK(*Overlaps(s46, Region::Box({0, 2}, {4, 2}), Region::Flat(8, 9)));
  CHECK_FALSE(*Overlaps(s46, Region::Box({0, 2}, {4, 2}), Region::Flat(4, 8)));
  CHECK_FALSE(*Overlaps(s46, Region::Flat(0, 5), Region::Flat(5, 10)));
  CHECK(*Overlaps(s46, Region::Flat(0, 6), Region::Flat(5, 10)));
  CHECK_FALSE(*Overlaps(s46, Region::Box({0, 0}, {4, 3}), Region::Box({0, 3}, {4, 3})));
  CHECK(*Overlaps(s46, Region::Box({0, 0}, {4, 4}), Region::Box({3, 3}, {1, 3})));
  CHECK_FALSE(*Overlaps(s46, Region::Whole(), Region::Flat(3, 3)));
  CHECK_FALSE(*Overlaps({3, 0}, Region::Whole(), Region::Whole()));
  CHECK(*Overlaps({}, Region::Whole(), Region::Box({}, {})));
}

TEST_CASE("property: RegionRuns, counts and predicates match the reference",
          "[geometry][property]") {
  std::mt19937_64 rng(0x5eed0001);
  for (int iter = 0; iter < 600; ++iter) {
    const Shape shape = RandomShape(rng);
    const Region a = RandomRegion(rng, shape);
    const Region b = RandomRegion(rng, shape);
    INFO("iter " << iter << " a " << a.DebugString() << " b " << b.DebugString());
    REQUIRE(ValidateRegion(shape, a).ok());

    const std::vector<ElementRun> naive_a = NaiveRuns(shape, a);
    const std::vector<ElementRun> naive_b = NaiveRuns(shape, b);
    REQUIRE(*RegionRuns(shape, a) == naive_a);
    int64_t count = 0;
    for (const ElementRun& r : naive_a) count += r.length;
    REQUIRE(*RegionNumElements(shape, a) == count);

    bool overlap = false;
    bool same = true;
    for (int64_t g = 0; g < NaiveNumel(shape); ++g) {
      const bool in_a = Contains(shape, a, g), in_b = Contains(shape, b, g);
      overlap |= in_a && in_b;
      same &= in_a == in_b;
    }
    REQUIRE(*Overlaps(shape, a, b) == overlap);
    REQUIRE(*SameElements(shape, a, b) == same);
    REQUIRE(*SameElements(shape, a, a));
  }
}

TEST_CASE("property: IntersectRegions matches an element-by-element copy", "[geometry][property]") {
  std::mt19937_64 rng(0x5eed0002);
  for (int iter = 0; iter < 600; ++iter) {
    const Shape shape = RandomShape(rng);
    const int64_t es = RandomElementSize(rng);
    const Region stored = RandomRegion(rng, shape);
    const Region requested =
        rng() % 4 == 0 ? RelatedRegion(rng, shape, stored) : RandomRegion(rng, shape);
    INFO("iter " << iter);
    CheckIntersection(shape, es, stored, requested);
  }
}

TEST_CASE("property: disjoint shards reassemble the whole tensor", "[geometry][property]") {
  std::mt19937_64 rng(0x5eed0003);
  for (int iter = 0; iter < 300; ++iter) {
    Shape shape = RandomShape(rng);
    if (shape.empty()) shape = {1 + static_cast<int64_t>(rng() % 9)};
    const int64_t es = RandomElementSize(rng);
    const int64_t n = NaiveNumel(shape);
    const int rank = static_cast<int>(shape.size());

    std::vector<Region> shards;
    switch (iter % 3) {
      case 0: {  // TP/PP-style: split dimension 0 into boxes
        const std::vector<int64_t> cuts = RandomCuts(rng, shape[0]);
        for (size_t k = 0; k + 1 < cuts.size(); ++k) {
          Ints off(rank, 0), len = shape;
          off[0] = cuts[k];
          len[0] = cuts[k + 1] - cuts[k];
          shards.push_back(Region::Box(off, len));
        }
        break;
      }
      case 1: {  // FSDP-style: flat cut points anywhere, mid-row included
        const std::vector<int64_t> cuts = RandomCuts(rng, n);
        for (size_t k = 0; k + 1 < cuts.size(); ++k) {
          shards.push_back(Region::Flat(cuts[k], cuts[k + 1]));
        }
        break;
      }
      default: {  // a grid over the first and last dimensions
        // With rank 1 those are the same dimension: cut it once.
        const std::vector<int64_t> rows =
            rank == 1 ? std::vector<int64_t>{0, shape[0]} : RandomCuts(rng, shape[0]);
        const std::vector<int64_t> cols = RandomCuts(rng, shape[rank - 1]);
        for (size_t r = 0; r + 1 < rows.size(); ++r) {
          for (size_t c = 0; c + 1 < cols.size(); ++c) {
            Ints off(rank, 0), len = shape;
            off[0] = rows[r];
            len[0] = rows[r + 1] - rows[r];
            off[rank - 1] += cols[c];
            len[rank - 1] = cols[c + 1] - cols[c];
            shards.push_back(Region::Box(off, len));
          }
        }
        break;
      }
    }
    INFO("iter " << iter << " shards " << shards.size());

    const std::vector<uint8_t> full = NaivePacked(shape, es, Region::Whole());
    std::vector<uint8_t> out(full.size(), 0);
    std::vector<int> writes(full.size(), 0);
    for (size_t k = 0; k < shards.size(); ++k) {
      INFO("shard " << shards[k].DebugString());
      for (size_t l = k + 1; l < shards.size(); ++l) {
        REQUIRE_FALSE(*Overlaps(shape, shards[k], shards[l]));
      }
      const std::vector<uint8_t> stored = NaivePacked(shape, es, shards[k]);
      absl::StatusOr<std::vector<ByteRun>> runs =
          IntersectRegions(shape, es, shards[k], Region::Whole());
      REQUIRE(runs.ok());
      CheckWellFormed(*runs, es);
      for (const ByteRun& r : *runs) {
        REQUIRE(r.src_offset + r.length <= static_cast<int64_t>(stored.size()));
        REQUIRE(r.dst_offset + r.length <= static_cast<int64_t>(out.size()));
        for (int64_t b = 0; b < r.length; ++b) {
          out[r.dst_offset + b] = stored[r.src_offset + b];
          ++writes[r.dst_offset + b];
        }
      }
    }
    REQUIRE(std::all_of(writes.begin(), writes.end(), [](int w) { return w == 1; }));
    REQUIRE(out == full);
  }
}

TEST_CASE("compact: one column of a [2^40, 2] tensor is one strided run", "[geometry]") {
  const int64_t rows = int64_t{1} << 40;
  const Shape shape = {rows, 2};
  absl::StatusOr<std::vector<StridedRun>> runs =
      IntersectRegionsStrided(shape, 4, Region::Whole(), Region::Box({0, 1}, {rows, 1}));
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 1);
  CHECK((*runs)[0] == StridedRun{4, 0, 4, rows, 8, 4});
  CHECK(*StridedRunCount(shape, Region::Whole(), Region::Box({0, 1}, {rows, 1})) == 1);
  // The other direction: the column stored, the whole requested.
  runs = IntersectRegionsStrided(shape, 2, Region::Box({0, 0}, {rows, 1}), Region::Whole());
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 1);
  CHECK((*runs)[0] == StridedRun{0, 0, 2, rows, 2, 4});
  // Expanding it is refused, naming the bound, instead of allocating 2^40 runs.
  absl::StatusOr<std::vector<ByteRun>> expanded =
      IntersectRegions(shape, 4, Region::Whole(), Region::Box({0, 1}, {rows, 1}));
  REQUIRE_FALSE(expanded.ok());
  CHECK(expanded.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(expanded.status().message()),
             Catch::Contains("--max_runs_per_shard") && Catch::Contains("1048576"));
  CHECK(RegionRuns(shape, Region::Box({0, 1}, {rows, 1})).status().code() ==
        absl::StatusCode::kResourceExhausted);
  // Counting and comparing cost nothing per row either.
  CHECK(*CommonElements(shape, Region::Box({0, 1}, {rows, 1}), Region::Flat(3, 11)) == 4);
  CHECK_FALSE(*Overlaps(shape, Region::Box({0, 1}, {rows, 1}), Region::Box({0, 0}, {rows, 1})));
  CHECK(*SameElements(shape, Region::Box({0, 0}, {rows, 2}), Region::Flat(0, 2 * rows)));
}

TEST_CASE("compact: a flat range is at most 2 * rank - 1 pieces", "[geometry]") {
  const Shape shape = {7, 5, 3, 4};
  const int64_t n = 7 * 5 * 3 * 4;
  for (int64_t b = 0; b < n; b += 3) {
    for (int64_t e = b; e <= n; e += 5) {
      absl::StatusOr<int64_t> pieces = StridedRunCount(shape, Region::Flat(b, e), Region::Whole());
      REQUIRE(pieces.ok());
      CHECK(*pieces <= 2 * 4 - 1);
      // Copied into the whole tensor they are contiguous: one run after joining.
      absl::StatusOr<std::vector<StridedRun>> runs =
          IntersectRegionsStrided(shape, 1, Region::Flat(b, e), Region::Whole());
      REQUIRE(runs.ok());
      CHECK(runs->size() == (b == e ? 0u : 1u));
    }
  }
  // Near 2^63 elements, mid-row cuts: a handful of pieces, never a row each.
  const int64_t big = int64_t{1} << 30;
  const Shape huge = {big, big, 4};
  CHECK(*StridedRunCount(huge, Region::Flat(5, big * big * 4 - 7), Region::Whole()) <= 5);
  CHECK(*RegionNumElements(huge, Region::Flat(5, big * big * 4 - 7)) == big * big * 4 - 12);
}

TEST_CASE("compact: 3-d box cut in its two inner dims needs a run per outer index", "[geometry]") {
  const Shape shape = {1000, 1000, 4};
  const Region box = Region::Box({0, 0, 1}, {1000, 999, 2});
  CHECK(*StridedRunCount(shape, box, Region::Whole()) == 1000);
  absl::StatusOr<std::vector<StridedRun>> runs =
      IntersectRegionsStrided(shape, 1, box, Region::Whole(), 999);
  REQUIRE_FALSE(runs.ok());
  CHECK(runs.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(runs.status().message()),
             Catch::Contains("the limit is 999 (--max_runs_per_shard)"));
  runs = IntersectRegionsStrided(shape, 1, box, Region::Whole(), 1000);
  REQUIRE(runs.ok());
  CHECK(runs->size() == 1000);
  CHECK((*runs)[0] == StridedRun{0, 1, 2, 999, 2, 4});
}

TEST_CASE("compact: a [2^63-1] tensor plans without allocating per element", "[geometry]") {
  const Shape shape = {kMax};
  CHECK(*RegionNumElements(shape, Region::Whole()) == kMax);
  absl::StatusOr<std::vector<StridedRun>> runs =
      IntersectRegionsStrided(shape, 1, Region::Whole(), Region::Box({kMax - 10}, {4}));
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 1);
  CHECK((*runs)[0] == StridedRun{kMax - 10, 0, 4, 1, 0, 0});
  CHECK(*RegionSpan(shape, Region::Flat(3, kMax)) == std::pair<int64_t, int64_t>{3, kMax});
  // Its bytes do not fit when elements are wider than a byte.
  CHECK_FALSE(IntersectRegionsStrided(shape, 2, Region::Whole(), Region::Whole()).ok());
}

TEST_CASE("compact: many size-1 dimensions cost nothing", "[geometry]") {
  // Built as std::vectors first: gcc 12 mistakes a large InlinedVector's
  // heap elements for its inline ones (-Warray-bounds).
  std::vector<int64_t> dims(100000, 1), offsets(dims.size(), 0), lengths(dims.size(), 1);
  dims[500] = 6;
  offsets[500] = 2;
  lengths[500] = 3;
  const Shape shape(dims.begin(), dims.end());
  const Ints off(offsets.begin(), offsets.end()), len(lengths.begin(), lengths.end());
  absl::StatusOr<std::vector<ByteRun>> runs =
      IntersectRegions(shape, 4, Region::Whole(), Region::Box(off, len));
  REQUIRE(runs.ok());
  CHECK(*runs == std::vector<ByteRun>{{8, 0, 12}});
  CHECK(*StridedRunCount(shape, Region::Flat(1, 5), Region::Whole()) == 1);
}

// Found by tests/fuzz: the other dimensions of an empty tensor are
// unbounded, and multiplying them out into strides overflowed (undefined
// behaviour, caught by UBSan in the fuzz build).
TEST_CASE("compact: an empty tensor with huge other dimensions", "[geometry]") {
  const Shape shape = {13340, int64_t{6755399441055743}, 0};
  const Region box = Region::Box({5, 1, 0}, {2, int64_t{1} << 40, 0});
  CHECK(*NumElements(shape) == 0);
  CHECK(*RegionSpan(shape, box) == std::pair<int64_t, int64_t>{0, 0});
  CHECK(*StridedRunCount(shape, Region::Whole(), box) == 0);
  CHECK(IntersectRegionsStrided(shape, 4, Region::Whole(), box)->empty());
  CHECK(*CommonElements(shape, Region::Whole(), Region::Flat(0, 0)) == 0);
  CHECK(RegionRuns(shape, Region::Whole())->empty());
}

TEST_CASE("property: strided runs, spans and common counts match the reference",
          "[geometry][property]") {
  std::mt19937_64 rng(0x5eed0004);
  for (int iter = 0; iter < 600; ++iter) {
    const Shape shape = RandomShape(rng);
    const int64_t es = RandomElementSize(rng);
    const Region a = RandomRegion(rng, shape);
    const Region b = rng() % 4 == 0 ? RelatedRegion(rng, shape, a) : RandomRegion(rng, shape);
    INFO("iter " << iter << " a " << a.DebugString() << " b " << b.DebugString());
    // Strided runs applied one repetition at a time copy exactly the
    // elements the naive walk finds, each once.
    const std::vector<uint8_t> src = NaivePacked(shape, es, a);
    std::vector<uint8_t> expected;
    int64_t common = 0;
    for (int64_t g = 0; g < NaiveNumel(shape); ++g) {
      if (!Contains(shape, b, g)) continue;
      const bool in_a = Contains(shape, a, g);
      common += in_a ? 1 : 0;
      for (int64_t k = 0; k < es; ++k) expected.push_back(in_a ? Pattern(g, k) : 0xEE);
    }
    absl::StatusOr<std::vector<StridedRun>> runs = IntersectRegionsStrided(shape, es, a, b);
    REQUIRE(runs.ok());
    REQUIRE(static_cast<int64_t>(runs->size()) <= *StridedRunCount(shape, a, b));
    std::vector<uint8_t> dst(expected.size(), 0xEE);
    std::vector<int> writes(expected.size(), 0);
    for (const StridedRun& r : *runs) {
      REQUIRE(r.count >= 1);
      REQUIRE(r.length > 0);
      if (r.count > 1) {
        REQUIRE(r.src_stride >= r.length);
        REQUIRE(r.dst_stride >= r.length);
      }
      for (int64_t k = 0; k < r.count; ++k) {
        const int64_t s0 = r.src_offset + k * r.src_stride;
        const int64_t d0 = r.dst_offset + k * r.dst_stride;
        REQUIRE(s0 + r.length <= static_cast<int64_t>(src.size()));
        REQUIRE(d0 + r.length <= static_cast<int64_t>(dst.size()));
        for (int64_t x = 0; x < r.length; ++x) {
          dst[d0 + x] = src[s0 + x];
          ++writes[d0 + x];
        }
      }
    }
    REQUIRE(std::all_of(writes.begin(), writes.end(), [](int w) { return w <= 1; }));
    REQUIRE(dst == expected);
    REQUIRE(*CommonElements(shape, a, b) == common);

    const std::vector<ElementRun> naive = NaiveRuns(shape, a);
    const std::pair<int64_t, int64_t> span =
        naive.empty() ? std::pair<int64_t, int64_t>{0, 0}
                      : std::pair<int64_t, int64_t>{naive.front().begin,
                                                    naive.back().begin + naive.back().length};
    REQUIRE(*RegionSpan(shape, a) == span);
  }
}

}  // namespace
}  // namespace ckpt::geo
