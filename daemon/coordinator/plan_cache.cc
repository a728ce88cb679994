#include "daemon/coordinator/plan_cache.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace ckpt::coordinator {
std::string PlanKey(absl::Span<const v1::NodeSavePlan> nodes) {
  std::string key;
  {
    google::protobuf::io::StringOutputStream stream(&key);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    // Field by field rather than a copy of each plan with those two fields
    // cleared: the ranks' shards are nearly all of it. Every other field of
    // NodeSavePlan and HostIdentity is here (plan_cache_test checks the
    // messages have no field this misses).
    for (const v1::NodeSavePlan& node : nodes) {
      for (const std::string* text : {&node.host().host(), &node.host().address(), &node.job()}) {
        coded.WriteVarint64(text->size());
        coded.WriteString(*text);
      }
      coded.WriteVarint64(static_cast<uint64_t>(node.world_size()));
      coded.WriteVarint64(static_cast<uint64_t>(node.writer_threads()));
      coded.WriteVarint32(node.partial() ? 1 : 0);
      coded.WriteVarint64(static_cast<uint64_t>(node.ranks_size()));
      for (const v1::RankSavePlan& rank : node.ranks()) {
        coded.WriteVarint64(rank.ByteSizeLong());
        rank.SerializeWithCachedSizes(&coded);
      }
    }
  }
  return key;
}

absl::StatusOr<v1::SaveAssignment> SavePlanCache::Plan(absl::Span<const v1::NodeSavePlan> nodes,
                                                       const SavePlannerOptions& options,
                                                       bool* hit) {
  if (hit != nullptr) *hit = false;
  if (nodes.empty()) return PlanSave(nodes, options);  // names the error
  const v1::NodeSavePlan& first = nodes.front();
  std::string key = PlanKey(nodes);
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(first.job());
    if (it != entries_.end() && it->second.key == key) {
      // What may differ is checked as PlanSave would.
      if (absl::Status s = ValidateSaveHeader(first, options); !s.ok()) return s;
      for (const v1::NodeSavePlan& node : nodes) {
        if (node.step() != first.step()) {
          return absl::InvalidArgumentError(absl::StrCat("host ", node.host().host(),
                                                         " disagrees on job, step, world size or "
                                                         "partial"));
        }
      }
      v1::SaveAssignment assignment = it->second.assignment;
      v1::CheckpointManifest& manifest = *assignment.mutable_manifest_template();
      manifest.set_step(first.step());
      manifest.clear_user_metadata();
      for (const v1::NodeSavePlan& node : nodes) {
        for (const auto& [k, v] : node.user_metadata()) (*manifest.mutable_user_metadata())[k] = v;
      }
      it->second.last_use = ++clock_;
      ++hits_;
      if (hit != nullptr) *hit = true;
      return assignment;
    }
  }
  absl::StatusOr<v1::SaveAssignment> planned = PlanSave(nodes, options);
  absl::MutexLock lock(&mu_);
  ++misses_;
  if (!planned.ok()) return planned;
  Entry entry;
  entry.bytes = key.size() + planned->ByteSizeLong();
  if (entry.bytes > max_bytes_) return planned;  // too large to keep: planned every time
  auto old = entries_.find(first.job());
  if (old != entries_.end()) {
    bytes_ -= old->second.bytes;
    entries_.erase(old);
  }
  entry.key = std::move(key);
  entry.assignment = *planned;
  entry.assignment.clear_save_id();
  entry.assignment.clear_partial_dir();
  entry.last_use = ++clock_;
  bytes_ += entry.bytes;
  entries_.emplace(first.job(), std::move(entry));
  EvictLocked();
  return planned;
}

void SavePlanCache::EvictLocked() {
  while (bytes_ > max_bytes_ && !entries_.empty()) {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    bytes_ -= oldest->second.bytes;
    entries_.erase(oldest);
  }
}

PlanCacheStats SavePlanCache::Stats() const {
  absl::MutexLock lock(&mu_);
  return PlanCacheStats{hits_, misses_, bytes_, entries_.size()};
}

}  // namespace ckpt::coordinator
