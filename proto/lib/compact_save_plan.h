// A host's save plan in the compact form the coordinator plans from
// (coordinator.proto, RankSavePlan): each distinct tensor and region once
// per host, each shard as two indexes into them. Node daemons build their
// plans this way; the coordinator compacts a plan that arrives spelled out.
//
// Thread-safety: a builder is one thread's; the functions are pure.
#ifndef CKPT_PROTO_LIB_COMPACT_SAVE_PLAN_H_
#define CKPT_PROTO_LIB_COMPACT_SAVE_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/coordinator.pb.h"
#include "proto/lib/request_limits.h"

namespace ckpt {

// Adds ranks' shards to a host's plan in the compact form. Tensors are
// told apart by name, dtype and shape, so ranks that disagree on a tensor
// stay apart for the planner to name them; regions by how they are
// written (SameRegion).
class CompactSavePlanBuilder {
 public:
  // Marks `node` compact; it must have no ranks yet. Keeps a pointer.
  explicit CompactSavePlanBuilder(v1::NodeSavePlan& node);

  // Sets `rank`'s shard_tensors and shard_regions (one each per shard, in
  // order) and adds what the host's tables lack. Device buffers are not
  // kept: the caller has checked them.
  void AddShards(const google::protobuf::RepeatedPtrField<v1::TensorShard>& shards,
                 v1::RankSavePlan& rank);

 private:
  uint32_t TensorOf(const v1::TensorShard& shard, size_t position);
  uint32_t RegionOf(const v1::Region& region);

  v1::NodeSavePlan& node_;
  absl::flat_hash_map<absl::string_view, std::vector<uint32_t>> tensors_by_fqn_;
  absl::flat_hash_map<size_t, std::vector<uint32_t>> regions_by_hash_;
  // Ranks list their tensors in the same order: the previous rank's i-th
  // shard's tensor is the likely one.
  std::vector<uint32_t> tensor_hint_;
};

// Turns a plan spelled out into the compact form in place (a compact plan
// is left as it is). Each shard with a device buffer is validated with it
// first (ValidateShardRequest), as the compact form drops it; errors name
// the rank.
absl::Status CompactSavePlan(v1::NodeSavePlan& node, const RequestLimits& limits);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_COMPACT_SAVE_PLAN_H_
