#include "proto/lib/region_convert.h"

#include <algorithm>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "proto/lib/dtype.h"
#include "proto/lib/status_context.h"
#include "proto/lib/validation.h"

namespace ckpt {

geo::Region RegionFromProto(const v1::Region& region) {
  switch (region.kind_case()) {
    case v1::Region::kBox:
      return geo::Region::Box(
          geo::Ints(region.box().offsets().begin(), region.box().offsets().end()),
          geo::Ints(region.box().lengths().begin(), region.box().lengths().end()));
    case v1::Region::kFlat:
      return geo::Region::Flat(region.flat().begin(), region.flat().end());
    default:
      return geo::Region::Whole();
  }
}

void RegionToProto(const geo::Region& region, v1::Region* out) {
  out->Clear();
  switch (region.kind) {
    case geo::Region::Kind::kBox:
      for (int64_t o : region.offsets) out->mutable_box()->add_offsets(o);
      for (int64_t l : region.lengths) out->mutable_box()->add_lengths(l);
      // A 0-d box has no dimensions; mutable_box() marks the oneof anyway.
      out->mutable_box();
      break;
    case geo::Region::Kind::kFlat:
      out->mutable_flat()->set_begin(region.flat_begin);
      out->mutable_flat()->set_end(region.flat_end);
      break;
    case geo::Region::Kind::kWhole:
      break;
  }
}

bool SameRegion(const v1::Region& a, const v1::Region& b) {
  if (a.kind_case() != b.kind_case()) return false;
  const auto same = [](const auto& x, const auto& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end());
  };
  if (a.has_box()) {
    return same(a.box().offsets(), b.box().offsets()) && same(a.box().lengths(), b.box().lengths());
  }
  return !a.has_flat() ||
         (a.flat().begin() == b.flat().begin() && a.flat().end() == b.flat().end());
}

size_t HashRegion(size_t seed, const v1::Region& region) {
  return absl::HashOf(
      seed, static_cast<int>(region.kind_case()), absl::MakeConstSpan(region.box().offsets()),
      absl::MakeConstSpan(region.box().lengths()), region.flat().begin(), region.flat().end());
}

geo::Shape ShapeFromProto(const google::protobuf::RepeatedField<int64_t>& dims) {
  return geo::Shape(dims.begin(), dims.end());
}

absl::StatusOr<ShardGeometry> ValidateShard(const v1::TensorShard& shard) {
  if (absl::Status s = ValidateName("tensor", shard.fqn()); !s.ok()) return s;
  auto context = [&](const absl::Status& s) {
    return WithContext(s, absl::StrCat("tensor ", shard.fqn()));
  };
  ShardGeometry g;
  absl::StatusOr<int64_t> size = DTypeSize(shard.dtype());
  if (!size.ok()) return context(size.status());
  g.element_size = *size;
  g.shape = ShapeFromProto(shard.global_shape());
  g.region = RegionFromProto(shard.region());
  if (absl::Status s = geo::NumBytes(g.shape, g.element_size).status(); !s.ok()) {
    return context(s);
  }
  absl::StatusOr<int64_t> elements = geo::RegionNumElements(g.shape, g.region);
  if (!elements.ok()) return context(elements.status());
  g.elements = *elements;
  // Cannot overflow: the region lies inside a shape whose byte size fits.
  g.bytes = g.elements * g.element_size;
  return g;
}

}  // namespace ckpt
