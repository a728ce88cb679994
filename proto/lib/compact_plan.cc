#include "proto/lib/compact_plan.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/status_context.h"

namespace ckpt {

CompactShardsBuilder::CompactShardsBuilder(
    google::protobuf::RepeatedPtrField<v1::TensorDesc>* tensors,
    google::protobuf::RepeatedPtrField<v1::Region>* regions)
    : tensors_(*tensors), regions_(*regions) {}

void CompactShardsBuilder::Add(const google::protobuf::RepeatedPtrField<v1::TensorShard>& shards,
                               google::protobuf::RepeatedField<uint32_t>* tensor_of,
                               google::protobuf::RepeatedField<uint32_t>* region_of) {
  tensor_of->Clear();
  region_of->Clear();
  tensor_of->Reserve(shards.size());
  region_of->Reserve(shards.size());
  if (tensor_hint_.size() < static_cast<size_t>(shards.size())) {
    tensor_hint_.resize(shards.size(), UINT32_MAX);
  }
  for (int i = 0; i < shards.size(); ++i) {
    tensor_of->Add(TensorOf(shards[i], i));
    region_of->Add(RegionOf(shards[i].region()));
  }
}

uint32_t CompactShardsBuilder::TensorOf(const v1::TensorShard& shard, size_t position) {
  const auto same = [&](uint32_t t) {
    const v1::TensorDesc& tensor = tensors_[static_cast<int>(t)];
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
  const uint32_t t = static_cast<uint32_t>(tensors_.size());
  v1::TensorDesc* tensor = tensors_.Add();
  tensor->set_fqn(shard.fqn());
  tensor->set_dtype(shard.dtype());
  *tensor->mutable_global_shape() = shard.global_shape();
  // The key views the table's own copy, which stays where it is (the
  // table's elements are separately allocated), not the shard's.
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

uint32_t CompactShardsBuilder::RegionOf(const v1::Region& region) {
  std::vector<uint32_t>& alike = regions_by_hash_[HashRegion(0, region)];
  for (uint32_t r : alike) {
    if (SameRegion(regions_[static_cast<int>(r)], region)) return r;
  }
  const uint32_t r = static_cast<uint32_t>(regions_.size());
  *regions_.Add() = region;
  alike.push_back(r);
  return r;
}

absl::Status CheckCompactTableSizes(const std::string& host, int ranks, int tensors, int regions,
                                    const RequestLimits& limits) {
  const int64_t most = static_cast<int64_t>(ranks) * limits.max_tensors_per_plan;
  if (tensors > most || regions > most) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host ", host, ": plan lists ", tensors, " tensors and ", regions,
                     " regions for ", ranks, " ranks; the limit is ", limits.max_tensors_per_plan,
                     " per rank (--max_tensors_per_plan)"));
  }
  return absl::OkStatus();
}

namespace {

// The two plans' ranks, alike but for their fields' names.
google::protobuf::RepeatedPtrField<v1::TensorShard>* SpelledOut(v1::RankSavePlan& rank) {
  return rank.mutable_shards();
}
google::protobuf::RepeatedPtrField<v1::TensorShard>* SpelledOut(
    v1::NodeLoadPlan::RankRequests& rank) {
  return rank.mutable_tensors();
}
bool HasCompactEntries(const v1::RankSavePlan& rank) {
  return rank.shard_tensors_size() > 0 || rank.shard_regions_size() > 0;
}
bool HasCompactEntries(const v1::NodeLoadPlan::RankRequests& rank) {
  return rank.request_tensors_size() > 0 || rank.request_regions_size() > 0;
}
void AddCompact(CompactShardsBuilder& builder, v1::RankSavePlan& rank) {
  builder.AddShards(rank.shards(), rank);
}
void AddCompact(CompactShardsBuilder& builder, v1::NodeLoadPlan::RankRequests& rank) {
  builder.AddRequests(rank.tensors(), rank);
}

// A plan spelled out is checked first (no compact parts beside the shards,
// no more shards per rank than a rank may send, each device buffer inside
// its allocation), then compacted.
template <typename Node>
absl::Status Compact(Node& node, const RequestLimits& limits) {
  if (node.compact()) return absl::OkStatus();
  if (node.tensors_size() > 0 || node.regions_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host ", node.host().host(), ": a plan spelled out has the compact form's tables"));
  }
  for (auto& rank : *node.mutable_ranks()) {
    const auto& shards = *SpelledOut(rank);
    if (HasCompactEntries(rank)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank.rank(), ": a plan spelled out has compact shards"));
    }
    if (shards.size() > limits.max_tensors_per_plan) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rank ", rank.rank(), ": plan has ", shards.size(), " tensors; the limit is ",
          limits.max_tensors_per_plan, " (--max_tensors_per_plan)"));
    }
    for (const v1::TensorShard& shard : shards) {
      if (!shard.has_device_buffer()) continue;
      if (absl::Status s = ValidateShardRequest(shard, limits).status(); !s.ok()) {
        return WithContext(s, absl::StrCat("rank ", rank.rank()));
      }
    }
  }
  CompactShardsBuilder builder(node);
  for (auto& rank : *node.mutable_ranks()) {
    AddCompact(builder, rank);
    SpelledOut(rank)->Clear();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CompactSavePlan(v1::NodeSavePlan& node, const RequestLimits& limits) {
  return Compact(node, limits);
}

absl::Status CompactLoadPlan(v1::NodeLoadPlan& node, const RequestLimits& limits) {
  return Compact(node, limits);
}

}  // namespace ckpt
