// Bounds on what one request may ask of the daemon, checked before anything
// is allocated for it, so that no request (hostile or mistaken) can crash the
// daemon or make it allocate memory or time out of proportion to the
// request's own size.
//
// Errors: INVALID_ARGUMENT for malformed input (a negative dimension, a
// rank outside the world, a bad name), RESOURCE_EXHAUSTED for well-formed
// input beyond a bound; the message names the bound, its value and the flag
// that sets it, e.g.
//   "plan has 100001 tensors; the limit is 100000 (--max_tensors_per_plan)".
//
// Each field names the ckptd flag suggested for it.
//
// Thread-safety: plain data and pure functions.
#ifndef CKPT_PROTO_LIB_REQUEST_LIMITS_H_
#define CKPT_PROTO_LIB_REQUEST_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/common.pb.h"
#include "ckpt/v1/node.pb.h"
#include "proto/lib/region_convert.h"

namespace ckpt {

struct RequestLimits {
  // --max_tensors_per_plan: tensor shards in one rank's PlanSave or Load.
  int64_t max_tensors_per_plan = 100'000;
  // --max_objects_per_plan: objects (or object keys) in one rank's request.
  int64_t max_objects_per_plan = 10'000;
  // --max_dims: dimensions of a tensor shape (and of a region box).
  int64_t max_dims = 64;
  // --max_runs_per_shard: strided copy runs one shard's geometry may need
  // (geo::IntersectRegionsStrided); only a box cut in two or more inner
  // dimensions needs more than a handful.
  int64_t max_runs_per_shard = int64_t{1} << 20;
  // --max_regions_per_tensor: distinct regions of one tensor in one save
  // (replicas of a region do not count). Bounds the save planner's overlap
  // check, quadratic in the regions whose spans intersect.
  int64_t max_regions_per_tensor = 16'384;
  // --max_world_size: ranks of one job.
  int64_t max_world_size = 65'536;
  // --max_user_metadata_entries / --max_user_metadata_bytes (keys + values).
  int64_t max_user_metadata_entries = 1'024;
  int64_t max_user_metadata_bytes = int64_t{1} << 20;
  // --max_name_bytes: job, tensor, object and session names. Job names
  // become directory names, so they are held to NAME_MAX (255) whatever
  // this says.
  int64_t max_name_bytes = 255;
  // --max_object_bytes: one object.
  int64_t max_object_bytes = int64_t{64} << 30;
  // --max_shard_bytes: the packed bytes of one shard (the region, not the
  // whole tensor: a small box of a huge tensor is fine).
  int64_t max_shard_bytes = int64_t{1} << 40;
  // --max_bytes_per_rank: shards plus objects of one rank's request.
  int64_t max_bytes_per_rank = int64_t{16} << 40;
  // --max_chunks_per_save: chunks (of --chunk_bytes) of one save, all ranks
  // together. Each is an entry of the plan, the manifest and the commit's
  // checksum report, so this bounds what planning allocates; a one-line
  // request for a column of a tall tensor can otherwise ask for millions.
  // 2^22 chunks of the default 4 MiB are 16 TiB.
  int64_t max_chunks_per_save = int64_t{1} << 22;
  // --max_message_bytes: the gRPC server's receive limit (the daemon sets it
  // on its ServerBuilder; nothing here checks it).
  int64_t max_message_bytes = int64_t{64} << 20;
};

// Directory names longer than this fail in the filesystem.
inline constexpr int64_t kNameMax = 255;

// Name rules of ValidateName plus the length bound.
absl::Status ValidateBoundedName(absl::string_view what, absl::string_view name,
                                 const RequestLimits& limits);

// One shard: name, dtype, dims count (before the shape is copied), shape,
// region, byte size against --max_shard_bytes, device buffer bounds.
// Returns the shard's packed bytes.
absl::StatusOr<int64_t> ValidateShardRequest(const v1::TensorShard& shard,
                                             const RequestLimits& limits);
// The same checks, returning the shard's geometry: planners that need it
// convert each shard once.
absl::StatusOr<ShardGeometry> ValidateShardRequestGeometry(const v1::TensorShard& shard,
                                                           const RequestLimits& limits);
// The device buffer bounds alone, for a shard of `bytes` bytes: a replica of
// a validated region still brings its own buffer.
absl::Status ValidateDeviceBuffer(const v1::TensorShard& shard, int64_t bytes);

absl::Status ValidateUserMetadata(const google::protobuf::Map<std::string, std::string>& metadata,
                                  const RequestLimits& limits);

// Job name, rank in [0, world_size), world_size in [1, --max_world_size],
// local_rank >= 0.
absl::Status ValidateAttachRequest(const v1::AttachRequest& request, const RequestLimits& limits);

// Step >= 0, a known tier, counts of shards and objects, every shard and object, distinct
// object keys, per-rank bytes, user metadata. World size and the session's
// job are the caller's to check (they live in the session).
absl::Status ValidatePlanSaveRequest(const v1::PlanSaveRequest& request,
                                     const RequestLimits& limits);

// Step >= -1 (-1: latest), a known tier, counts of tensors and object keys, every tensor,
// every key's name, per-rank bytes.
absl::Status ValidateLoadRequest(const v1::LoadRequest& request, const RequestLimits& limits);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_REQUEST_LIMITS_H_
