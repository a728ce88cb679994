// Hosts' save and load plans in the compact form the coordinator plans
// from (coordinator.proto, RankSavePlan): each distinct tensor and region
// once per host, each shard or request as two indexes into them. Node
// daemons build their plans this way; the coordinator compacts a plan that
// arrives spelled out.
//
// Thread-safety: a builder is one thread's; the functions are pure.
#ifndef CKPT_PROTO_LIB_COMPACT_PLAN_H_
#define CKPT_PROTO_LIB_COMPACT_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/coordinator.pb.h"
#include "proto/lib/request_limits.h"

namespace ckpt {

// Adds ranks' shards (or requests) to a host's tables. Tensors are told
// apart by name, dtype and shape, so ranks that disagree on a tensor stay
// apart for the planner to name them; regions by how they are written
// (SameRegion). Device buffers are not kept.
class CompactShardsBuilder {
 public:
  // The host's tables, empty; the builder keeps pointers to them.
  CompactShardsBuilder(google::protobuf::RepeatedPtrField<v1::TensorDesc>* tensors,
                       google::protobuf::RepeatedPtrField<v1::Region>* regions);
  explicit CompactShardsBuilder(v1::NodeSavePlan& node)
      : CompactShardsBuilder(node.mutable_tensors(), node.mutable_regions()) {
    node.set_compact(true);
  }
  explicit CompactShardsBuilder(v1::NodeLoadPlan& node)
      : CompactShardsBuilder(node.mutable_tensors(), node.mutable_regions()) {
    node.set_compact(true);
  }

  // Sets one index into each table per shard, in order, adding what the
  // tables lack.
  void Add(const google::protobuf::RepeatedPtrField<v1::TensorShard>& shards,
           google::protobuf::RepeatedField<uint32_t>* tensor_of,
           google::protobuf::RepeatedField<uint32_t>* region_of);
  void AddShards(const google::protobuf::RepeatedPtrField<v1::TensorShard>& shards,
                 v1::RankSavePlan& rank) {
    Add(shards, rank.mutable_shard_tensors(), rank.mutable_shard_regions());
  }
  void AddRequests(const google::protobuf::RepeatedPtrField<v1::TensorShard>& requests,
                   v1::NodeLoadPlan::RankRequests& rank) {
    Add(requests, rank.mutable_request_tensors(), rank.mutable_request_regions());
  }

 private:
  uint32_t TensorOf(const v1::TensorShard& shard, size_t position);
  uint32_t RegionOf(const v1::Region& region);

  google::protobuf::RepeatedPtrField<v1::TensorDesc>& tensors_;
  google::protobuf::RepeatedPtrField<v1::Region>& regions_;
  absl::flat_hash_map<absl::string_view, std::vector<uint32_t>> tensors_by_fqn_;
  absl::flat_hash_map<size_t, std::vector<uint32_t>> regions_by_hash_;
  // Ranks list their tensors in the same order: the previous rank's i-th
  // shard's tensor is the likely one.
  std::vector<uint32_t> tensor_hint_;
};

// A compact plan's tables list at most what its ranks may send
// (--max_tensors_per_plan each): checked before anything is sized from them.
absl::Status CheckCompactTableSizes(const std::string& host, int ranks, int tensors, int regions,
                                    const RequestLimits& limits);
template <typename Node>
absl::Status CheckCompactTables(const Node& node, const RequestLimits& limits) {
  return CheckCompactTableSizes(node.host().host(), node.ranks_size(), node.tensors_size(),
                                node.regions_size(), limits);
}

// Turn a plan spelled out into the compact form in place (a compact plan
// is left as it is). Each shard or request with a device buffer is
// validated with it first (ValidateShardRequest), as the compact form
// drops it; errors name the rank.
absl::Status CompactSavePlan(v1::NodeSavePlan& node, const RequestLimits& limits);
absl::Status CompactLoadPlan(v1::NodeLoadPlan& node, const RequestLimits& limits);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_COMPACT_PLAN_H_
