// How the readers of a ColumnManifest fill it (column_manifest.h): from a
// format-1 manifest, or from a compact root and its chunk tables
// (column_manifest_read.h). Not for other callers.
#ifndef CKPT_DAEMON_PLANNING_COLUMN_MANIFEST_ACCESS_H_
#define CKPT_DAEMON_PLANNING_COLUMN_MANIFEST_ACCESS_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/column_manifest.h"

namespace ckpt::planning {

struct ColumnManifestAccess {
  static constexpr uint32_t kNone = ~uint32_t{0};

  // The data files numbered as their chunks are added.
  struct FileNumbers {
    absl::flat_hash_map<std::string, uint32_t> ids;
    uint32_t last = kNone;
  };

  // Everything of `m` but its tensors and its split's tables and layouts.
  static void FillHeader(const v1::CheckpointManifest& m, ColumnManifest& out);
  // The number of `file` in out.files(), added if new.
  static uint32_t FileNumber(absl::string_view file, FileNumbers& numbers, ColumnManifest& out);
  // Appends the chunk (of the shard being filled), its file numbered.
  static void AddChunk(const v1::StoredChunk& chunk, uint32_t file, ColumnManifest& out);

  static v1::CheckpointManifest& header(ColumnManifest& m) { return m.header_; }
  static std::vector<ColumnManifest::Tensor>& tensors(ColumnManifest& m) { return m.tensors_; }
  static std::vector<v1::ShardLayout>& layouts(ColumnManifest& m) { return m.layouts_; }
  static std::vector<uint32_t>& first_chunk(ColumnManifest& m) { return m.first_chunk_; }
  static std::vector<ColumnManifest::Chunk>& chunks(ColumnManifest& m) { return m.chunks_; }
  static std::vector<std::string>& files(ColumnManifest& m) { return m.files_; }
  static std::vector<uint32_t>& encoded_index(ColumnManifest& m) { return m.encoded_index_; }
  static std::vector<v1::StoredChunk>& encoded(ColumnManifest& m) { return m.encoded_; }
};

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_COLUMN_MANIFEST_ACCESS_H_
