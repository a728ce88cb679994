// ckpt.v1 shard messages <-> the proto-free geometry library, with the
// validation every request goes through (name, dtype, shape, region).
#ifndef CKPT_PROTO_LIB_REGION_CONVERT_H_
#define CKPT_PROTO_LIB_REGION_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ckpt/v1/common.pb.h"
#include "proto/lib/geometry.h"

namespace ckpt {

geo::Region RegionFromProto(const v1::Region& region);
void RegionToProto(const geo::Region& region, v1::Region* out);
geo::Shape ShapeFromProto(const google::protobuf::RepeatedField<int64_t>& dims);
// Whether two regions are written alike: the same kind and the same fields
// (a box and a flat range of the same elements are not).
bool SameRegion(const v1::Region& a, const v1::Region& b);
// `seed` combined with the region's kind and fields: regions that
// SameRegion finds alike hash alike.
size_t HashRegion(size_t seed, const v1::Region& region);

// A validated TensorShard.
struct ShardGeometry {
  geo::Shape shape;
  geo::Region region;
  int64_t element_size = 0;
  int64_t elements = 0;  // in the region
  int64_t bytes = 0;     // elements * element_size
};

// Validates fqn, dtype, shape and region (overflow-checked) and returns the
// shard's geometry; errors name the tensor.
absl::StatusOr<ShardGeometry> ValidateShard(const v1::TensorShard& shard);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_REGION_CONVERT_H_
