#include "proto/lib/compact_save_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/status_context.h"

namespace ckpt {

CompactSavePlanBuilder::CompactSavePlanBuilder(v1::NodeSavePlan& node) : node_(node) {
  node_.set_compact(true);
}

void CompactSavePlanBuilder::AddShards(
    const google::protobuf::RepeatedPtrField<v1::TensorShard>& shards, v1::RankSavePlan& rank) {
  rank.clear_shard_tensors();
  rank.clear_shard_regions();
  rank.mutable_shard_tensors()->Reserve(shards.size());
  rank.mutable_shard_regions()->Reserve(shards.size());
  if (tensor_hint_.size() < static_cast<size_t>(shards.size())) {
    tensor_hint_.resize(shards.size(), UINT32_MAX);
  }
  for (int i = 0; i < shards.size(); ++i) {
    rank.add_shard_tensors(TensorOf(shards[i], i));
    rank.add_shard_regions(RegionOf(shards[i].region()));
  }
}

uint32_t CompactSavePlanBuilder::TensorOf(const v1::TensorShard& shard, size_t position) {
  const auto same = [&](uint32_t t) {
    const v1::TensorDesc& tensor = node_.tensors(static_cast<int>(t));
    return tensor.fqn() == shard.fqn() && tensor.dtype() == shard.dtype() &&
           std::equal(tensor.global_shape().begin(), tensor.global_shape().end(),
                      shard.global_shape().begin(), shard.global_shape().end());
  };
  uint32_t& hint = tensor_hint_[position];
  if (hint != UINT32_MAX && same(hint)) return hint;
  std::vector<uint32_t>& named = tensors_by_fqn_[shard.fqn()];
  for (uint32_t t : named) {
    if (same(t)) return hint = t;
  }
  const uint32_t t = static_cast<uint32_t>(node_.tensors_size());
  v1::TensorDesc* tensor = node_.add_tensors();
  tensor->set_fqn(shard.fqn());
  tensor->set_dtype(shard.dtype());
  *tensor->mutable_global_shape() = shard.global_shape();
  // The key views the table's own copy, which stays where it is: the
  // table's elements are separately allocated.
  if (named.empty()) {
    auto node = tensors_by_fqn_.extract(shard.fqn());
    node.key() = tensor->fqn();
    node.mapped().push_back(t);
    tensors_by_fqn_.insert(std::move(node));
  } else {
    named.push_back(t);
  }
  return hint = t;
}

uint32_t CompactSavePlanBuilder::RegionOf(const v1::Region& region) {
  std::vector<uint32_t>& alike = regions_by_hash_[HashRegion(0, region)];
  for (uint32_t r : alike) {
    if (SameRegion(node_.regions(static_cast<int>(r)), region)) return r;
  }
  const uint32_t r = static_cast<uint32_t>(node_.regions_size());
  *node_.add_regions() = region;
  alike.push_back(r);
  return r;
}

absl::Status CompactSavePlan(v1::NodeSavePlan& node, const RequestLimits& limits) {
  if (node.compact()) return absl::OkStatus();
  if (node.tensors_size() > 0 || node.regions_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host ", node.host().host(), ": a plan spelled out has the compact form's tables"));
  }
  for (const v1::RankSavePlan& rank : node.ranks()) {
    if (rank.shard_tensors_size() > 0 || rank.shard_regions_size() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank.rank(), ": a plan spelled out has compact shards"));
    }
    if (rank.shards_size() > limits.max_tensors_per_plan) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rank ", rank.rank(), ": plan has ", rank.shards_size(), " tensors; the limit is ",
          limits.max_tensors_per_plan, " (--max_tensors_per_plan)"));
    }
    for (const v1::TensorShard& shard : rank.shards()) {
      if (!shard.has_device_buffer()) continue;
      if (absl::Status s = ValidateShardRequest(shard, limits).status(); !s.ok()) {
        return WithContext(s, absl::StrCat("rank ", rank.rank()));
      }
    }
  }
  CompactSavePlanBuilder builder(node);
  for (v1::RankSavePlan& rank : *node.mutable_ranks()) {
    builder.AddShards(rank.shards(), rank);
    rank.clear_shards();
  }
  return absl::OkStatus();
}

}  // namespace ckpt
