#include "daemon/planning/manifest_io.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/planning/manifest_footprint.h"
#include "proto/lib/crc32c.h"

namespace ckpt::planning {

std::string WithCrcTrailer(std::string payload) {
  const uint32_t crc = Crc32c(payload.data(), payload.size());
  for (int i = 0; i < 4; ++i) payload.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  return payload;
}

std::string EncodeManifest(const v1::CheckpointManifest& manifest) {
  std::string out;
  manifest.SerializeToString(&out);
  return WithCrcTrailer(std::move(out));
}

absl::StatusOr<absl::string_view> CheckedPayload(absl::string_view bytes, absl::string_view source,
                                                 absl::string_view what) {
  if (bytes.size() < 4) {
    return absl::DataLossError(
        absl::StrCat(source, ": ", what, " is truncated (", bytes.size(), " bytes)"));
  }
  const absl::string_view payload = bytes.substr(0, bytes.size() - 4);
  const uint32_t stored = TrailerCrc(bytes);
  const uint32_t actual = Crc32c(payload.data(), payload.size());
  if (stored != actual) {
    return absl::DataLossError(absl::StrFormat(
        "%s: %s checksum mismatch (stored %08x, computed %08x)", source, what, stored, actual));
  }
  return payload;
}

uint32_t TrailerCrc(absl::string_view bytes) {
  uint32_t stored = 0;
  if (bytes.size() < 4) return stored;
  const size_t at = bytes.size() - 4;
  for (int i = 0; i < 4; ++i) {
    stored |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return stored;
}

namespace {

absl::StatusOr<absl::string_view> Payload(absl::string_view bytes, absl::string_view source) {
  return CheckedPayload(bytes, source, "manifest");
}

absl::StatusOr<v1::CheckpointManifest> Parse(absl::string_view payload, absl::string_view source) {
  v1::CheckpointManifest manifest;
  if (!manifest.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(absl::StrCat(source, ": manifest does not parse"));
  }
  return manifest;
}

}  // namespace

absl::StatusOr<v1::CheckpointManifest> DecodeManifest(absl::string_view bytes,
                                                      absl::string_view source) {
  absl::StatusOr<absl::string_view> payload = Payload(bytes, source);
  if (!payload.ok()) return payload.status();
  return Parse(*payload, source);
}

absl::StatusOr<v1::CheckpointManifest> DecodeBoundedManifest(absl::string_view bytes,
                                                             absl::string_view source,
                                                             const ManifestLimits& limits,
                                                             ManifestFootprint* footprint) {
  absl::StatusOr<absl::string_view> payload = Payload(bytes, source);
  if (!payload.ok()) return payload.status();
  absl::StatusOr<ManifestFootprint> measured = MeasureManifest(*payload, source);
  if (!measured.ok()) return measured.status();
  if (absl::Status s = CheckManifestFootprint(*measured, bytes.size(), source, limits); !s.ok()) {
    return s;
  }
  if (footprint != nullptr) *footprint = *measured;
  return Parse(*payload, source);
}

namespace {

// Const and mutable views of the same fields, so one walk serves both.
const auto& Tensors(const v1::CheckpointManifest& m) { return m.tensors(); }
auto& Tensors(v1::CheckpointManifest& m) { return *m.mutable_tensors(); }
const auto& Shards(const v1::TensorEntry& t) { return t.shards(); }
auto& Shards(v1::TensorEntry& t) { return *t.mutable_shards(); }
const auto& Chunks(const v1::StoredShard& s) { return s.chunks(); }
auto& Chunks(v1::StoredShard& s) { return *s.mutable_chunks(); }
const auto& Objects(const v1::CheckpointManifest& m) { return m.objects(); }
auto& Objects(v1::CheckpointManifest& m) { return *m.mutable_objects(); }
const v1::StoredChunk& Chunk(const v1::ObjectEntry& o) { return o.chunk(); }
v1::StoredChunk& Chunk(v1::ObjectEntry& o) { return *o.mutable_chunk(); }

template <typename Manifest, typename Fn>
absl::Status VisitChunks(Manifest& manifest, const Fn& fn) {
  for (auto& tensor : Tensors(manifest)) {
    const std::string owner = absl::StrCat("tensor ", tensor.fqn());
    for (auto& shard : Shards(tensor)) {
      for (auto& chunk : Chunks(shard)) {
        if (absl::Status s = fn(chunk, owner); !s.ok()) return s;
      }
    }
  }
  for (auto& object : Objects(manifest)) {
    if (absl::Status s = fn(Chunk(object), absl::StrCat("object ", object.key())); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ForEachChunk(
    const v1::CheckpointManifest& manifest,
    const std::function<absl::Status(const v1::StoredChunk&, const std::string&)>& fn) {
  return VisitChunks(manifest, fn);
}

absl::Status ForEachMutableChunk(
    v1::CheckpointManifest& manifest,
    const std::function<absl::Status(v1::StoredChunk&, const std::string&)>& fn) {
  return VisitChunks(manifest, fn);
}

}  // namespace ckpt::planning
