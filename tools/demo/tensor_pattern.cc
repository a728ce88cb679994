#include "tools/demo/tensor_pattern.h"

#include <atomic>

#include "absl/hash/hash.h"
#include "proto/lib/dtype.h"
#include "proto/lib/geometry.h"

namespace ckpt::testing {
namespace {

// The client's DType shares ckpt.v1's numbering.
int64_t ElementSize(DType dtype) { return DTypeSize(static_cast<v1::DType>(dtype)).value_or(1); }

geo::Region ToGeo(const Region& r) {
  switch (r.kind) {
    case Region::Kind::kBox:
      return geo::Region::Box(geo::Ints(r.offsets.begin(), r.offsets.end()),
                              geo::Ints(r.lengths.begin(), r.lengths.end()));
    case Region::Kind::kFlat:
      return geo::Region::Flat(r.flat_begin, r.flat_end);
    default:
      return geo::Region::Whole();
  }
}

geo::Shape ToGeo(const std::vector<int64_t>& shape) {
  return geo::Shape(shape.begin(), shape.end());
}

uint64_t Seed(const std::string& fqn) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : fqn) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::atomic<bool> compressible{false};

// splitmix64: cheap, and every byte position gets an independent value
// (of 4 bits when compressible, so that codecs have something to do).
inline char PatternByte(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index >> 3) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const char byte = static_cast<char>(z >> (8 * (index & 7)));
  return compressible.load(std::memory_order_relaxed) ? static_cast<char>(byte & 0x0f) : byte;
}

// Calls fn(packed_offset, global_byte_index, length) for every run.
template <typename Fn>
absl::Status ForEachRun(const HostTensor& t, Fn fn) {
  const int64_t esz = ElementSize(t.dtype);
  absl::StatusOr<std::vector<geo::ElementRun>> runs =
      geo::RegionRuns(ToGeo(t.global_shape), ToGeo(t.region));
  if (!runs.ok()) return runs.status();
  int64_t packed = 0;
  for (const geo::ElementRun& run : *runs) {
    fn(packed, run.begin * esz, run.length * esz);
    packed += run.length * esz;
  }
  return absl::OkStatus();
}

}  // namespace

void UseCompressiblePattern(bool on) { compressible.store(on, std::memory_order_relaxed); }

absl::StatusOr<int64_t> ShardBytes(const HostTensor& tensor) {
  absl::StatusOr<int64_t> n =
      geo::RegionNumElements(ToGeo(tensor.global_shape), ToGeo(tensor.region));
  if (!n.ok()) return n.status();
  return *n * ElementSize(tensor.dtype);
}

absl::StatusOr<std::vector<char>> PatternShard(const HostTensor& tensor) {
  absl::StatusOr<int64_t> bytes = ShardBytes(tensor);
  if (!bytes.ok()) return bytes.status();
  std::vector<char> out(*bytes);
  const uint64_t seed = Seed(tensor.fqn);
  absl::Status s = ForEachRun(tensor, [&](int64_t packed, int64_t global, int64_t length) {
    for (int64_t i = 0; i < length; ++i) out[packed + i] = PatternByte(seed, global + i);
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<int64_t> CountMismatches(const HostTensor& tensor, const char* data,
                                        int64_t* first) {
  const uint64_t seed = Seed(tensor.fqn);
  int64_t bad = 0;
  if (first != nullptr) *first = -1;
  absl::Status s = ForEachRun(tensor, [&](int64_t packed, int64_t global, int64_t length) {
    for (int64_t i = 0; i < length; ++i) {
      if (data[packed + i] != PatternByte(seed, global + i)) {
        if (bad++ == 0 && first != nullptr) *first = packed + i;
      }
    }
  });
  if (!s.ok()) return s;
  return bad;
}

}  // namespace ckpt::testing
