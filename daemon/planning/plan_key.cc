#include "daemon/planning/plan_key.h"

#include <openssl/evp.h>

#include <cstring>
#include <vector>

#include "absl/strings/string_view.h"

namespace ckpt::planning {
namespace {

// Takes a plan's fields one by one, staging them a buffer at a time for
// the digest.
class PlanKeyWriter {
 public:
  PlanKeyWriter();
  ~PlanKeyWriter();
  PlanKeyWriter(const PlanKeyWriter&) = delete;
  PlanKeyWriter& operator=(const PlanKeyWriter&) = delete;

  void Node(const v1::NodeSavePlan& node);  // its fields but its ranks
  void Rank(const v1::RankSavePlan& rank);  // its number, compact shards and shard count
  void Shard(const v1::TensorShard& shard);
  void Objects(const v1::RankSavePlan& rank);
  void Text(absl::string_view text);
  void Int(int64_t v);
  std::string Finish();

 private:
  static constexpr size_t kMaxVarint = 10;
  void Ints(const google::protobuf::RepeatedField<int64_t>& values);
  void Indexes(const google::protobuf::RepeatedField<uint32_t>& values);
  void Region(const v1::Region& region);
  void Bytes(const void* data, size_t size);
  void Flush();
  void Digest(const void* data, size_t size);

  EVP_MD_CTX* digest_ = nullptr;
  bool failed_ = false;
  unsigned char stage_[16384];
  size_t staged_ = 0;
};

PlanKeyWriter::PlanKeyWriter() : digest_(EVP_MD_CTX_new()) {
  if (digest_ == nullptr || EVP_DigestInit_ex(digest_, EVP_sha256(), nullptr) != 1) {
    failed_ = true;
  }
}

PlanKeyWriter::~PlanKeyWriter() { EVP_MD_CTX_free(digest_); }

inline void PlanKeyWriter::Int(int64_t v) {
  if (staged_ + kMaxVarint > sizeof(stage_)) Flush();
  uint64_t u = static_cast<uint64_t>(v);
  while (u >= 0x80) {
    stage_[staged_++] = static_cast<unsigned char>(u | 0x80);
    u >>= 7;
  }
  stage_[staged_++] = static_cast<unsigned char>(u);
}

inline void PlanKeyWriter::Text(absl::string_view text) {
  Int(static_cast<int64_t>(text.size()));
  Bytes(text.data(), text.size());
}

inline void PlanKeyWriter::Ints(const google::protobuf::RepeatedField<int64_t>& values) {
  Int(values.size());
  for (int64_t v : values) Int(v);
}

inline void PlanKeyWriter::Bytes(const void* data, size_t size) {
  if (staged_ + size > sizeof(stage_)) Flush();
  if (size > sizeof(stage_)) {
    Digest(data, size);
    return;
  }
  std::memcpy(stage_ + staged_, data, size);
  staged_ += size;
}

// Every field of these messages but the step and the user metadata
// (plan_cache_test checks the messages have no field this misses).
void PlanKeyWriter::Node(const v1::NodeSavePlan& node) {
  Text(node.host().host());
  Text(node.host().address());
  Text(node.host().failure_domain());
  Text(node.job());
  Int(node.world_size());
  Int(node.writer_threads());
  Int(node.partial() ? 1 : 0);
  Int(node.compact() ? 1 : 0);
  Int(node.tier());
  Int(node.tensors_size());
  for (const v1::TensorDesc& tensor : node.tensors()) {
    Text(tensor.fqn());
    Int(tensor.dtype());
    Ints(tensor.global_shape());
  }
  Int(node.regions_size());
  for (const v1::Region& region : node.regions()) Region(region);
  Int(node.ranks_size());
}

void PlanKeyWriter::Rank(const v1::RankSavePlan& rank) {
  Int(rank.rank());
  // Fixed width: these are a compact plan's millions of shards.
  Indexes(rank.shard_tensors());
  Indexes(rank.shard_regions());
  Int(rank.shards_size());
}

void PlanKeyWriter::Region(const v1::Region& region) {
  Int(region.kind_case());
  if (region.has_box()) {
    Ints(region.box().offsets());
    Ints(region.box().lengths());
  } else if (region.has_flat()) {
    Int(region.flat().begin());
    Int(region.flat().end());
  }
}

void PlanKeyWriter::Indexes(const google::protobuf::RepeatedField<uint32_t>& values) {
  Int(values.size());
  Bytes(values.data(), values.size() * sizeof(uint32_t));
}

void PlanKeyWriter::Shard(const v1::TensorShard& shard) {
  Text(shard.fqn());
  Int(shard.dtype());
  Ints(shard.global_shape());
  Region(shard.region());
  Int(shard.has_device_buffer() ? 1 : 0);
  if (shard.has_device_buffer()) {
    const v1::DeviceBuffer& buffer = shard.device_buffer();
    Text(buffer.ipc_handle());
    Int(static_cast<int64_t>(buffer.offset()));
    Int(static_cast<int64_t>(buffer.allocation_bytes()));
    Int(buffer.device());
  }
}

void PlanKeyWriter::Objects(const v1::RankSavePlan& rank) {
  Int(rank.objects_size());
  for (const v1::ObjectDesc& object : rank.objects()) {
    Text(object.key());
    Int(object.global() ? 1 : 0);
    Int(static_cast<int64_t>(object.length()));
  }
}

std::string PlanKeyWriter::Finish() {
  Flush();
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (failed_ || EVP_DigestFinal_ex(digest_, out, &size) != 1) return std::string();
  return std::string(reinterpret_cast<const char*>(out), size);
}

void PlanKeyWriter::Flush() {
  Digest(stage_, staged_);
  staged_ = 0;
}

void PlanKeyWriter::Digest(const void* data, size_t size) {
  if (!failed_ && size > 0 && EVP_DigestUpdate(digest_, data, size) != 1) failed_ = true;
}

}  // namespace

std::string HostPlanKey(const v1::NodeSavePlan& node) {
  PlanKeyWriter key;
  key.Node(node);
  for (const v1::RankSavePlan& rank : node.ranks()) {
    key.Rank(rank);
    for (const v1::TensorShard& shard : rank.shards()) key.Shard(shard);
    key.Objects(rank);
  }
  return key.Finish();
}

std::string PlanKeyOfHosts(absl::Span<const std::string> host_keys) {
  PlanKeyWriter key;
  key.Int(static_cast<int64_t>(host_keys.size()));
  for (const std::string& host : host_keys) {
    if (host.empty()) return std::string();
    key.Text(host);
  }
  return key.Finish();
}

std::string PlanKey(absl::Span<const v1::NodeSavePlan> nodes) {
  std::vector<std::string> host_keys;
  host_keys.reserve(nodes.size());
  for (const v1::NodeSavePlan& node : nodes) host_keys.push_back(HostPlanKey(node));
  return PlanKeyOfHosts(host_keys);
}

}  // namespace ckpt::planning
