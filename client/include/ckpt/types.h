// Public types of the ckpt client: what a rank describes its tensors with.
#ifndef CKPT_CLIENT_INCLUDE_CKPT_TYPES_H_
#define CKPT_CLIENT_INCLUDE_CKPT_TYPES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ckpt {

// Same numbering as ckpt.v1.DType (the on-disk format).
enum class DType : int {
  kFloat32 = 1,
  kFloat16 = 2,
  kBFloat16 = 3,
  kFloat64 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kInt16 = 7,
  kInt32 = 8,
  kInt64 = 9,
  kBool = 10,
  kFloat8E4M3 = 11,
  kFloat8E5M2 = 12,
};

// The part of a global tensor a rank holds: the whole tensor, a box
// (per-dimension offsets and lengths: TP/PP slicing) or a flat range of the
// row-major flattened tensor (FSDP flat parameters).
struct Region {
  enum class Kind { kWhole, kBox, kFlat };
  Kind kind = Kind::kWhole;
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  int64_t flat_begin = 0;
  int64_t flat_end = 0;

  static Region Whole() { return {}; }
  static Region Box(std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
    Region r;
    r.kind = Kind::kBox;
    r.offsets = std::move(offsets);
    r.lengths = std::move(lengths);
    return r;
  }
  static Region Flat(int64_t begin, int64_t end) {
    Region r;
    r.kind = Kind::kFlat;
    r.flat_begin = begin;
    r.flat_end = end;
    return r;
  }
};

// Where a shard's bytes live.
enum class Location { kHost, kCudaDevice };

// A shard: its region's elements, packed in ascending row-major order of the
// global tensor, in host memory or (kCudaDevice) in this process's GPU
// memory. Saving reads `data`; loading fills it.
struct HostTensor {
  std::string fqn;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape;
  Region region;
  void* data = nullptr;
  Location location = Location::kHost;
};

// Non-tensor state: a named byte string, this rank's own or one for the job.
struct SaveObject {
  std::string key;
  bool global = false;
  std::string bytes;
};

// An object to load: this rank's object of that key or, failing that, the
// job's global one.
struct LoadObject {
  std::string key;
  std::string* out = nullptr;
};

inline constexpr int64_t kLatestStep = -1;

}  // namespace ckpt

#endif  // CKPT_CLIENT_INCLUDE_CKPT_TYPES_H_
