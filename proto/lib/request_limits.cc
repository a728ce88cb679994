#include "proto/lib/request_limits.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/lib/geometry.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/status_context.h"
#include "proto/lib/validation.h"

namespace ckpt {
namespace {

absl::Status Exhausted(absl::string_view what, int64_t value, int64_t limit,
                       absl::string_view flag) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " ", value, "; the limit is ", limit, " (--", flag, ")"));
}

// Counts come from repeated fields (int) and sizes from uint64 fields: both
// compared in a type that holds either without wrapping.
bool Above(uint64_t value, int64_t limit) {
  return limit < 0 || value > static_cast<uint64_t>(limit);
}

absl::Status ValidateObject(const v1::ObjectDesc& object, const RequestLimits& limits) {
  if (absl::Status s = ValidateBoundedName("object", object.key(), limits); !s.ok()) return s;
  if (Above(object.length(), limits.max_object_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("object ", object.key(), " has ", object.length(), " bytes; the limit is ",
                     limits.max_object_bytes, " (--max_object_bytes)"));
  }
  return absl::OkStatus();
}

// Adds `bytes` to the rank's total, bounded by --max_bytes_per_rank. Every
// addend was bounded first, so the sum of at most ~2^17 of them cannot wrap;
// the check is on the running total.
absl::Status AddRankBytes(uint64_t bytes, absl::string_view role, uint64_t* total,
                          const RequestLimits& limits) {
  *total += bytes;
  if (Above(*total, limits.max_bytes_per_rank)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(role, " has at least ", *total, " bytes of shards and objects; the limit is ",
                     limits.max_bytes_per_rank, " (--max_bytes_per_rank)"));
  }
  return absl::OkStatus();
}

absl::Status CheckCount(absl::string_view what, int count, int64_t limit, absl::string_view flag) {
  if (!Above(static_cast<uint64_t>(count), limit)) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("plan has ", count, " ", what, "; the limit is ", limit, " (--", flag, ")"));
}

absl::Status CheckSessionId(absl::string_view id, const RequestLimits& limits) {
  if (Above(id.size(), limits.max_name_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("session id is ", id.size(), " bytes; no session has an id that long"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateBoundedName(absl::string_view what, absl::string_view name,
                                 const RequestLimits& limits) {
  if (Above(name.size(), limits.max_name_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " name is ", name.size(),
                                                     " bytes; the limit is ", limits.max_name_bytes,
                                                     " (--max_name_bytes)"));
  }
  // ValidateName holds every name to NAME_MAX as well.
  return ValidateName(what, name);
}

absl::StatusOr<ShardGeometry> ValidateShardRequestGeometry(const v1::TensorShard& shard,
                                                           const RequestLimits& limits) {
  if (absl::Status s = ValidateBoundedName("tensor", shard.fqn(), limits); !s.ok()) return s;
  // Built only for an error: planners validate millions of shards.
  auto who = [&] { return absl::StrCat("tensor ", shard.fqn()); };
  // Before anything copies the shape or the box.
  if (Above(shard.global_shape_size(), limits.max_dims)) {
    return WithContext(
        Exhausted("shape has dimensions", shard.global_shape_size(), limits.max_dims, "max_dims"),
        who());
  }
  if (shard.region().has_box()) {
    const int n =
        std::max(shard.region().box().offsets_size(), shard.region().box().lengths_size());
    if (Above(n, limits.max_dims)) {
      return WithContext(Exhausted("region box has dimensions", n, limits.max_dims, "max_dims"),
                         who());
    }
  }
  absl::StatusOr<ShardGeometry> g = ValidateShard(shard);
  if (!g.ok()) return g.status();
  if (g->bytes > limits.max_shard_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(who(), ": region ", g->region.DebugString(), " has ", g->bytes,
                     " bytes; the limit is ", limits.max_shard_bytes, " (--max_shard_bytes)"));
  }
  absl::StatusOr<int64_t> runs = geo::StridedRunCount(g->shape, g->region, geo::Region::Whole());
  if (!runs.ok()) return WithContext(runs.status(), who());
  if (*runs > limits.max_runs_per_shard) {
    return absl::ResourceExhaustedError(absl::StrCat(
        who(), ": region ", g->region.DebugString(), " needs ", *runs,
        " strided runs; the limit is ", limits.max_runs_per_shard, " (--max_runs_per_shard)"));
  }
  if (absl::Status s = ValidateDeviceBuffer(shard, g->bytes); !s.ok()) return s;
  return g;
}

absl::Status ValidateDeviceBuffer(const v1::TensorShard& shard, int64_t bytes) {
  if (!shard.has_device_buffer()) return absl::OkStatus();
  const v1::DeviceBuffer& buffer = shard.device_buffer();
  if (buffer.offset() > buffer.allocation_bytes() ||
      static_cast<uint64_t>(bytes) > buffer.allocation_bytes() - buffer.offset()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", shard.fqn(), ": device buffer [", buffer.offset(), ", +", bytes,
                     ") lies outside its allocation of ", buffer.allocation_bytes(), " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ValidateShardRequest(const v1::TensorShard& shard,
                                             const RequestLimits& limits) {
  absl::StatusOr<ShardGeometry> g = ValidateShardRequestGeometry(shard, limits);
  if (!g.ok()) return g.status();
  return g->bytes;
}

absl::Status ValidateUserMetadata(const google::protobuf::Map<std::string, std::string>& metadata,
                                  const RequestLimits& limits) {
  if (Above(metadata.size(), limits.max_user_metadata_entries)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("user metadata has ", metadata.size(), " entries; the limit is ",
                     limits.max_user_metadata_entries, " (--max_user_metadata_entries)"));
  }
  uint64_t bytes = 0;
  for (const auto& [key, value] : metadata) bytes += key.size() + value.size();
  if (Above(bytes, limits.max_user_metadata_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("user metadata has ", bytes, " bytes of keys and values; the limit is ",
                     limits.max_user_metadata_bytes, " (--max_user_metadata_bytes)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateAttachRequest(const v1::AttachRequest& request, const RequestLimits& limits) {
  if (absl::Status s = ValidateBoundedName("job", request.job(), limits); !s.ok()) return s;
  if (request.world_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", request.world_size(), " is not positive"));
  }
  if (Above(request.world_size(), limits.max_world_size)) {
    return Exhausted("world size", request.world_size(), limits.max_world_size, "max_world_size");
  }
  if (request.rank() < 0 || request.rank() >= request.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", request.rank(), " is outside world size ", request.world_size()));
  }
  if (request.local_rank() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("local rank ", request.local_rank(), " is negative"));
  }
  if (request.local_world_size() < 0 || request.local_world_size() > request.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("local world size ", request.local_world_size(),
                                                   " is not in [0, world size ",
                                                   request.world_size(), "]"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePlanSaveRequest(const v1::PlanSaveRequest& request,
                                     const RequestLimits& limits) {
  if (absl::Status s = CheckSessionId(request.session_id(), limits); !s.ok()) return s;
  if (request.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step ", request.step(), " is negative"));
  }
  // proto3 enums are open: any number arrives.
  if (!v1::SaveTier_IsValid(request.tier())) {
    return absl::InvalidArgumentError(
        absl::StrCat("tier ", static_cast<int>(request.tier()), " is unknown"));
  }
  if (absl::Status s = CheckCount("tensors", request.shards_size(), limits.max_tensors_per_plan,
                                  "max_tensors_per_plan");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckCount("objects", request.objects_size(), limits.max_objects_per_plan,
                                  "max_objects_per_plan");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateUserMetadata(request.user_metadata(), limits); !s.ok()) return s;
  uint64_t total = 0;
  for (const v1::TensorShard& shard : request.shards()) {
    absl::StatusOr<int64_t> bytes = ValidateShardRequest(shard, limits);
    if (!bytes.ok()) return bytes.status();
    if (absl::Status s = AddRankBytes(*bytes, "the plan", &total, limits); !s.ok()) return s;
  }
  std::set<absl::string_view> keys;
  for (const v1::ObjectDesc& object : request.objects()) {
    if (absl::Status s = ValidateObject(object, limits); !s.ok()) return s;
    if (!keys.insert(object.key()).second) {
      return absl::InvalidArgumentError(absl::StrCat("plan lists object ", object.key(), " twice"));
    }
    if (absl::Status s = AddRankBytes(object.length(), "the plan", &total, limits); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateLoadRequest(const v1::LoadRequest& request, const RequestLimits& limits) {
  if (absl::Status s = CheckSessionId(request.session_id(), limits); !s.ok()) return s;
  if (request.step() < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", request.step(), " is neither a step nor -1 (latest)"));
  }
  if (!v1::LoadTier_IsValid(request.tier())) {
    return absl::InvalidArgumentError(
        absl::StrCat("load tier ", static_cast<int>(request.tier()), " is unknown"));
  }
  if (absl::Status s = CheckCount("tensors", request.tensors_size(), limits.max_tensors_per_plan,
                                  "max_tensors_per_plan");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckCount("object keys", request.object_keys_size(),
                                  limits.max_objects_per_plan, "max_objects_per_plan");
      !s.ok()) {
    return s;
  }
  uint64_t total = 0;
  for (const v1::TensorShard& shard : request.tensors()) {
    absl::StatusOr<int64_t> bytes = ValidateShardRequest(shard, limits);
    if (!bytes.ok()) return bytes.status();
    if (absl::Status s = AddRankBytes(*bytes, "the load", &total, limits); !s.ok()) return s;
  }
  for (const std::string& key : request.object_keys()) {
    if (absl::Status s = ValidateBoundedName("object", key, limits); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ckpt
