// A checkpoint's manifest as the load planner reads it (load_planner.h):
// its tensors, each shard layout once, and every tensor chunk as a row of
// plain columns. A cluster's manifest lists millions of chunks; as
// messages (format 1, or a split manifest joined) each is a shard, a
// region and a chunk with its file name, about 400 bytes: 6.5 GB at
// 131,072 ranks. As rows it is 32 bytes a chunk and a few per shard, and
// the planner compares file numbers and layout numbers, not names and
// regions.
//
// Made from a format-1 manifest (FromManifest), or read straight from a
// compact root and its chunk tables without joining them
// (column_manifest_read.h), with the checks ValidateManifest makes.
//
// Thread-safety: immutable once made; const methods from any thread.
#ifndef CKPT_DAEMON_PLANNING_COLUMN_MANIFEST_H_
#define CKPT_DAEMON_PLANNING_COLUMN_MANIFEST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ckpt/v1/manifest.pb.h"

namespace ckpt::planning {

struct ColumnManifestAccess;

class ColumnManifest {
 public:
  static constexpr uint32_t kNoLayout = ~uint32_t{0};

  struct Tensor {
    std::string fqn;
    v1::DType dtype = v1::DTYPE_UNSPECIFIED;
    std::vector<int64_t> shape;
    uint32_t layout = kNoLayout;  // index into layouts(); kNoLayout: no shard
    uint32_t first_shard = 0;     // its shards are numbered from here, over all tensors
  };
  // One stored chunk of a tensor shard.
  struct Chunk {
    uint64_t file_offset = 0;
    uint64_t shard_offset = 0;
    uint64_t length = 0;
    uint32_t file = 0;  // index into files()
    uint32_t crc32c = 0;
  };

  // A format-1 manifest, validated or not (the load planner checks what
  // it relies on). INVALID_ARGUMENT for a split or compact root, whose
  // chunks it does not list; RESOURCE_EXHAUSTED past 2^32 - 1 shards or
  // chunks.
  static absl::StatusOr<std::shared_ptr<const ColumnManifest>> FromManifest(
      const v1::CheckpointManifest& manifest);

  // Everything but the tensors: job, step, objects, metadata.
  const v1::CheckpointManifest& header() const { return header_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // Each distinct list of shard regions once; a tensor's shard k has its
  // layout's region k.
  const std::vector<v1::ShardLayout>& layouts() const { return layouts_; }
  int shards_of(const Tensor& tensor) const {
    return tensor.layout == kNoLayout ? 0 : layouts_[tensor.layout].regions_size();
  }
  // Shard g's chunks (numbered over all tensors, as Tensor::first_shard),
  // in shard order.
  absl::Span<const Chunk> chunks_of(uint32_t shard) const {
    return absl::MakeConstSpan(chunks_).subspan(first_chunk_[shard],
                                                first_chunk_[shard + 1] - first_chunk_[shard]);
  }
  size_t shards() const { return first_chunk_.size() - 1; }
  size_t chunks() const { return chunks_.size(); }
  const std::vector<Chunk>& all_chunks() const { return chunks_; }
  // The index of chunks_of(shard)[0] among all chunks.
  uint32_t first_chunk(uint32_t shard) const { return first_chunk_[shard]; }
  const std::vector<std::string>& files() const { return files_; }
  // Chunk `index` (over all) whole, with how it is stored, where it is
  // encoded or a delta (proto/lib/stored_chunk.h); null for a raw chunk.
  const v1::StoredChunk* encoded(uint32_t index) const;

  // What it takes in memory, about.
  uint64_t MemoryBytes() const;

  // Where `other` holds something else (its header but the format, a
  // tensor, a shard's region, a chunk or its file), said for the first
  // difference; empty when both hold the same checkpoint, however their
  // layouts and files are numbered. For tests and fuzzers.
  std::string Difference(const ColumnManifest& other) const;

 private:
  friend struct ColumnManifestAccess;  // the readers, which fill it

  v1::CheckpointManifest header_;
  std::vector<Tensor> tensors_;
  std::vector<v1::ShardLayout> layouts_;
  std::vector<uint32_t> first_chunk_{0};  // by shard, and one past the last
  std::vector<Chunk> chunks_;
  std::vector<std::string> files_;
  std::vector<uint32_t> encoded_index_;  // ascending: the chunks in encoded_
  std::vector<v1::StoredChunk> encoded_;
};

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_COLUMN_MANIFEST_H_
