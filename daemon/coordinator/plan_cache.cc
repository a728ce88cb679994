#include "daemon/coordinator/plan_cache.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ckpt::coordinator {
namespace {

// Writes fields as raw bytes, each string and list behind its length (so
// the encoding is unambiguous), either appending them to a key or
// comparing them with an existing one: a key is built from millions of
// shards, and protobuf's serializer, per message, was most of the cache's
// cost.
class KeyWriter {
 public:
  explicit KeyWriter(std::string* out) : out_(out) {}
  explicit KeyWriter(absl::string_view expected) : expected_(expected) {}

  // Comparing: whether everything written so far, and nothing more, is the
  // expected key.
  bool Matches() const { return same_ && at_ == expected_.size(); }

  void Int(int64_t v) { Bytes(&v, sizeof(v)); }
  void Text(absl::string_view text) {
    Int(static_cast<int64_t>(text.size()));
    Bytes(text.data(), text.size());
  }
  void Ints(const google::protobuf::RepeatedField<int64_t>& values) {
    Int(values.size());
    Bytes(values.data(), values.size() * sizeof(int64_t));
  }

 private:
  void Bytes(const void* data, size_t size) {
    if (out_ != nullptr) {
      out_->append(static_cast<const char*>(data), size);
      return;
    }
    if (!same_) return;
    if (expected_.size() - at_ < size || std::memcmp(expected_.data() + at_, data, size) != 0) {
      same_ = false;
      return;
    }
    at_ += size;
  }

  std::string* out_ = nullptr;
  absl::string_view expected_;
  size_t at_ = 0;
  bool same_ = true;
};

void WriteShard(const v1::TensorShard& shard, KeyWriter& key) {
  key.Text(shard.fqn());
  key.Int(shard.dtype());
  key.Ints(shard.global_shape());
  const v1::Region& region = shard.region();
  key.Int(region.kind_case());
  if (region.has_box()) {
    key.Ints(region.box().offsets());
    key.Ints(region.box().lengths());
  } else if (region.has_flat()) {
    key.Int(region.flat().begin());
    key.Int(region.flat().end());
  }
  key.Int(shard.has_device_buffer() ? 1 : 0);
  if (shard.has_device_buffer()) {
    const v1::DeviceBuffer& buffer = shard.device_buffer();
    key.Text(buffer.ipc_handle());
    key.Int(static_cast<int64_t>(buffer.offset()));
    key.Int(static_cast<int64_t>(buffer.allocation_bytes()));
    key.Int(buffer.device());
  }
}

// Every field of these messages but the step and the user metadata
// (plan_cache_test checks the messages have no field this misses).
void WriteKey(absl::Span<const v1::NodeSavePlan> nodes, KeyWriter& key) {
  for (const v1::NodeSavePlan& node : nodes) {
    key.Text(node.host().host());
    key.Text(node.host().address());
    key.Text(node.job());
    key.Int(node.world_size());
    key.Int(node.writer_threads());
    key.Int(node.partial() ? 1 : 0);
    key.Int(node.ranks_size());
    for (const v1::RankSavePlan& rank : node.ranks()) {
      key.Int(rank.rank());
      key.Int(rank.shards_size());
      for (const v1::TensorShard& shard : rank.shards()) WriteShard(shard, key);
      key.Int(rank.objects_size());
      for (const v1::ObjectDesc& object : rank.objects()) {
        key.Text(object.key());
        key.Int(object.global() ? 1 : 0);
        key.Int(static_cast<int64_t>(object.length()));
      }
    }
  }
}

}  // namespace

std::string PlanKey(absl::Span<const v1::NodeSavePlan> nodes) {
  size_t shards = 0;
  for (const v1::NodeSavePlan& node : nodes) {
    for (const v1::RankSavePlan& rank : node.ranks()) shards += rank.shards_size();
  }
  std::string out;
  out.reserve(shards * 96);  // a 2-d box shard of a short name
  KeyWriter key(&out);
  WriteKey(nodes, key);
  return out;
}

bool PlanKeyEquals(absl::Span<const v1::NodeSavePlan> nodes, absl::string_view expected) {
  KeyWriter key(expected);
  WriteKey(nodes, key);
  return key.Matches();
}

absl::StatusOr<v1::SaveAssignment> SavePlanCache::Plan(absl::Span<const v1::NodeSavePlan> nodes,
                                                       const SavePlannerOptions& options,
                                                       bool* hit) {
  if (hit != nullptr) *hit = false;
  if (nodes.empty()) return PlanSave(nodes, options);  // names the error
  const v1::NodeSavePlan& first = nodes.front();
  std::shared_ptr<const Cached> cached;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(first.job());
    if (it != entries_.end()) cached = it->second.cached;
  }
  if (cached != nullptr && PlanKeyEquals(nodes, cached->key)) {
    // What may differ is checked as PlanSave would.
    if (absl::Status s = ValidateSaveHeader(first, options); !s.ok()) return s;
    for (const v1::NodeSavePlan& node : nodes) {
      if (node.step() != first.step()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "host ", node.host().host(), " disagrees on job, step, world size or partial"));
      }
    }
    v1::SaveAssignment assignment = cached->assignment;
    v1::CheckpointManifest& manifest = *assignment.mutable_manifest_template();
    manifest.set_step(first.step());
    manifest.clear_user_metadata();
    for (const v1::NodeSavePlan& node : nodes) {
      for (const auto& [k, v] : node.user_metadata()) (*manifest.mutable_user_metadata())[k] = v;
    }
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(first.job());
    if (it != entries_.end() && it->second.cached == cached) it->second.last_use = ++clock_;
    ++hits_;
    if (hit != nullptr) *hit = true;
    return assignment;
  }
  std::string key = PlanKey(nodes);
  absl::StatusOr<v1::SaveAssignment> planned = PlanSave(nodes, options);
  if (!planned.ok()) {
    absl::MutexLock lock(&mu_);
    ++misses_;
    return planned;
  }
  const uint64_t bytes = key.size() + planned->ByteSizeLong();
  std::shared_ptr<Cached> fresh;
  if (bytes <= max_bytes_) {  // else too large to keep: planned every time
    fresh = std::make_shared<Cached>();
    fresh->key = std::move(key);
    fresh->assignment = *planned;
    fresh->assignment.clear_save_id();
    fresh->assignment.clear_partial_dir();
  }
  absl::MutexLock lock(&mu_);
  ++misses_;
  if (fresh == nullptr) return planned;
  auto old = entries_.find(first.job());
  if (old != entries_.end()) {
    bytes_ -= old->second.bytes;
    entries_.erase(old);
  }
  Entry entry;
  entry.cached = std::move(fresh);
  entry.bytes = bytes;
  entry.last_use = ++clock_;
  bytes_ += bytes;
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
