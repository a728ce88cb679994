#include "daemon/coordinator/plan_cache.h"

#include <openssl/evp.h>

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ckpt::coordinator {
namespace {

// Encodes fields unambiguously (each integer as a varint, each string and
// list behind its length) into a SHA-256 digest, the key. A cluster's plan
// is millions of shards: its encoding, kept whole, was a gigabyte that the
// kernel first had to fault in (5 s at 8 million shards), more than the
// cache's whole budget, so large plans were never cached. The digest is 32
// bytes; SHA-256 collisions are found neither by chance nor by
// construction, so equal digests are equal plans (the reason a weaker,
// faster hash is not used). Fields gather in a small buffer and are
// digested a buffer at a time.
class KeyWriter {
 public:
  KeyWriter() : digest_(EVP_MD_CTX_new()) {
    if (digest_ == nullptr || EVP_DigestInit_ex(digest_.get(), EVP_sha256(), nullptr) != 1) {
      failed_ = true;
    }
  }
  KeyWriter(const KeyWriter&) = delete;
  KeyWriter& operator=(const KeyWriter&) = delete;

  void Int(int64_t v) {
    if (staged_ + kMaxVarint > sizeof(stage_)) Flush();
    uint64_t u = static_cast<uint64_t>(v);
    while (u >= 0x80) {
      stage_[staged_++] = static_cast<unsigned char>(u | 0x80);
      u >>= 7;
    }
    stage_[staged_++] = static_cast<unsigned char>(u);
  }
  void Text(absl::string_view text) {
    Int(static_cast<int64_t>(text.size()));
    Bytes(text.data(), text.size());
  }
  void Ints(const google::protobuf::RepeatedField<int64_t>& values) {
    Int(values.size());
    for (int64_t v : values) Int(v);
  }

  // The key: the digest of everything written. Empty if OpenSSL failed
  // (out of memory): an empty key matches no plan, so nothing is reused.
  std::string Finish() {
    Flush();
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (failed_ || EVP_DigestFinal_ex(digest_.get(), out, &size) != 1) return std::string();
    return std::string(reinterpret_cast<const char*>(out), size);
  }

 private:
  static constexpr size_t kMaxVarint = 10;
  struct FreeDigest {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };

  void Bytes(const void* data, size_t size) {
    if (staged_ + size > sizeof(stage_)) Flush();
    if (size > sizeof(stage_)) {
      Digest(data, size);
      return;
    }
    std::memcpy(stage_ + staged_, data, size);
    staged_ += size;
  }
  void Flush() {
    Digest(stage_, staged_);
    staged_ = 0;
  }
  void Digest(const void* data, size_t size) {
    if (!failed_ && size > 0 && EVP_DigestUpdate(digest_.get(), data, size) != 1) failed_ = true;
  }

  std::unique_ptr<EVP_MD_CTX, FreeDigest> digest_;
  bool failed_ = false;
  unsigned char stage_[16384];
  size_t staged_ = 0;
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
  KeyWriter key;
  WriteKey(nodes, key);
  return key.Finish();
}

v1::CheckpointManifest SavePlan::Manifest() const {
  v1::CheckpointManifest manifest = assignment->manifest_template();
  manifest.set_step(step);
  *manifest.mutable_user_metadata() = user_metadata;
  return manifest;
}

absl::StatusOr<SavePlan> SavePlanCache::Plan(absl::Span<const v1::NodeSavePlan> nodes,
                                             const SavePlannerOptions& options, bool* hit) {
  if (hit != nullptr) *hit = false;
  if (nodes.empty()) return PlanSave(nodes, options).status();  // names the error
  const v1::NodeSavePlan& first = nodes.front();
  SavePlan plan;
  plan.step = first.step();
  for (const v1::NodeSavePlan& node : nodes) {
    for (const auto& [k, v] : node.user_metadata()) plan.user_metadata[k] = v;
  }
  std::shared_ptr<const Cached> cached;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(first.job());
    if (it != entries_.end()) cached = it->second.cached;
  }
  // Digested once: compared with the job's cached plan, kept on a miss.
  std::string key = PlanKey(nodes);
  if (cached != nullptr && !key.empty() && key == cached->key) {
    // What may differ is checked as PlanSave would.
    if (absl::Status s = ValidateSaveHeader(first, options); !s.ok()) return s;
    for (const v1::NodeSavePlan& node : nodes) {
      if (node.step() != first.step()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "host ", node.host().host(), " disagrees on job, step, world size or partial"));
      }
    }
    plan.assignment = cached->assignment;
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(first.job());
    if (it != entries_.end() && it->second.cached == cached) it->second.last_use = ++clock_;
    ++hits_;
    if (hit != nullptr) *hit = true;
    return plan;
  }
  absl::StatusOr<std::shared_ptr<const v1::SaveAssignment>> planned =
      PlanSaveShared(nodes, options);
  if (!planned.ok()) {
    absl::MutexLock lock(&mu_);
    ++misses_;
    return planned.status();
  }
  const std::shared_ptr<const v1::SaveAssignment>& assignment = *planned;
  plan.assignment = assignment;
  const uint64_t bytes = key.size() + AssignmentBytes(*assignment);
  std::shared_ptr<Cached> fresh;
  if (bytes <= max_bytes_ && !key.empty()) {  // else planned every time
    fresh = std::make_shared<Cached>();
    fresh->key = std::move(key);
    fresh->assignment = assignment;
  }
  absl::MutexLock lock(&mu_);
  ++misses_;
  if (fresh == nullptr) return plan;
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
  return plan;
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
