// MANIFEST encoding: the serialized CheckpointManifest followed by a 4-byte
// little-endian CRC32C of those bytes, so a torn or flipped manifest is
// detected rather than half-parsed.
#ifndef CKPT_DAEMON_PLANNING_MANIFEST_IO_H_
#define CKPT_DAEMON_PLANNING_MANIFEST_IO_H_

#include <cstdint>
#include <functional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_footprint.h"

namespace ckpt::planning {

std::string EncodeManifest(const v1::CheckpointManifest& manifest);

// The trailer every manifest file ends with (split manifests' tables too).
std::string WithCrcTrailer(std::string payload);
// The bytes before the trailer, once it matches; DATA_LOSS "<source>:
// <what> is truncated" or "<what> checksum mismatch" otherwise.
absl::StatusOr<absl::string_view> CheckedPayload(absl::string_view bytes, absl::string_view source,
                                                 absl::string_view what);
// The CRC32C a trailer holds (0 for fewer than 4 bytes).
uint32_t TrailerCrc(absl::string_view bytes);
// DATA_LOSS naming `source` when the trailer is missing or does not match.
absl::StatusOr<v1::CheckpointManifest> DecodeManifest(absl::string_view bytes,
                                                      absl::string_view source);
// DecodeManifest of a manifest from disk: after the trailer, its footprint
// is measured and checked against `limits` (manifest_footprint.h), so one
// too large to hold is refused, FAILED_PRECONDITION naming the flag, before
// it is parsed.
// With `footprint`, the estimate is left there (JoinChunkTables builds on it).
absl::StatusOr<v1::CheckpointManifest> DecodeBoundedManifest(
    absl::string_view bytes, absl::string_view source, const ManifestLimits& limits,
    ManifestFootprint* footprint = nullptr);

// Calls fn(chunk, owner) for every stored chunk of the manifest: each
// tensor's ("tensor <fqn>"), then each object's ("object <key>"). Stops at,
// and returns, the first error fn returns.
absl::Status ForEachChunk(
    const v1::CheckpointManifest& manifest,
    const std::function<absl::Status(const v1::StoredChunk&, const std::string&)>& fn);
// The same over a manifest being filled in.
absl::Status ForEachMutableChunk(
    v1::CheckpointManifest& manifest,
    const std::function<absl::Status(v1::StoredChunk&, const std::string&)>& fn);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_MANIFEST_IO_H_
