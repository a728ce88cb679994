#include "daemon/planning/column_manifest.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "daemon/planning/column_manifest_access.h"
#include "daemon/planning/compact_root.h"
#include "daemon/planning/manifest_tables.h"
#include "proto/lib/stored_chunk.h"

namespace ckpt::planning {

void ColumnManifestAccess::FillHeader(const v1::CheckpointManifest& m, ColumnManifest& out) {
  v1::CheckpointManifest& h = out.header_;
  h.set_format_version(m.format_version());
  h.set_job(m.job());
  h.set_step(m.step());
  h.set_created_unix_ms(m.created_unix_ms());
  if (m.has_topology()) *h.mutable_topology() = m.topology();
  *h.mutable_objects() = m.objects();
  *h.mutable_user_metadata() = m.user_metadata();
  if (m.has_delta_base_step()) h.set_delta_base_step(m.delta_base_step());
  h.set_delta_ordinal(m.delta_ordinal());
}

uint32_t ColumnManifestAccess::FileNumber(absl::string_view file, FileNumbers& numbers,
                                          ColumnManifest& out) {
  // Consecutive chunks are mostly of one file: compared before hashed.
  if (numbers.last != kNone && out.files_[numbers.last] == file) return numbers.last;
  auto [known, fresh] = numbers.ids.try_emplace(file, static_cast<uint32_t>(out.files_.size()));
  if (fresh) out.files_.emplace_back(file);
  numbers.last = known->second;
  return numbers.last;
}

void ColumnManifestAccess::AddChunk(const v1::StoredChunk& chunk, uint32_t file,
                                    ColumnManifest& out) {
  if (IsEncoded(chunk) || chunk.has_delta_base()) {
    out.encoded_index_.push_back(static_cast<uint32_t>(out.chunks_.size()));
    out.encoded_.push_back(chunk);
  }
  out.chunks_.push_back(ColumnManifest::Chunk{chunk.file_offset(), chunk.shard_offset(),
                                              chunk.length(), file, chunk.crc32c()});
}

absl::StatusOr<std::shared_ptr<const ColumnManifest>> ColumnManifest::FromManifest(
    const v1::CheckpointManifest& m) {
  if (m.format_version() == kSplitManifestFormatVersion ||
      m.format_version() == kCompactRootFormatVersion || m.chunk_tables_size() > 0 ||
      m.shard_layouts_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the manifest of job ", m.job(), " step ", m.step(), " is a split manifest's root (format ",
        m.format_version(), "), which lists no chunks: read it with its chunk tables"));
  }
  auto out = std::make_shared<ColumnManifest>();
  ColumnManifestAccess::FillHeader(m, *out);
  uint64_t shards = 0;
  uint64_t chunks = 0;
  for (const v1::TensorEntry& tensor : m.tensors()) {
    shards += tensor.shards_size();
    for (const v1::StoredShard& shard : tensor.shards()) chunks += shard.chunks_size();
  }
  if (shards >= UINT32_MAX || chunks >= UINT32_MAX) {
    return absl::ResourceExhaustedError(absl::StrCat("the manifest holds ", shards, " shards and ",
                                                     chunks, " chunks, more than 2^32 - 1"));
  }
  out->tensors_.reserve(m.tensors_size());
  out->first_chunk_.reserve(shards + 1);
  out->chunks_.reserve(chunks);
  absl::flat_hash_map<size_t, std::vector<uint32_t>> layouts_by_hash;
  ColumnManifestAccess::FileNumbers numbers;
  for (const v1::TensorEntry& entry : m.tensors()) {
    Tensor& tensor = out->tensors_.emplace_back();
    tensor.fqn = entry.fqn();
    tensor.dtype = entry.dtype();
    tensor.shape.assign(entry.global_shape().begin(), entry.global_shape().end());
    tensor.first_shard = static_cast<uint32_t>(out->first_chunk_.size() - 1);
    if (entry.shards_size() == 0) continue;
    std::vector<uint32_t>& alike = layouts_by_hash[ShardRegionsHash(entry)];
    for (uint32_t l : alike) {
      if (SameShardRegions(entry, out->layouts_[l])) {
        tensor.layout = l;
        break;
      }
    }
    if (tensor.layout == kNoLayout) {
      v1::ShardLayout& fresh = out->layouts_.emplace_back();
      fresh.mutable_regions()->Reserve(entry.shards_size());
      for (const v1::StoredShard& shard : entry.shards()) *fresh.add_regions() = shard.region();
      tensor.layout = static_cast<uint32_t>(out->layouts_.size() - 1);
      alike.push_back(tensor.layout);
    }
    for (const v1::StoredShard& shard : entry.shards()) {
      for (const v1::StoredChunk& chunk : shard.chunks()) {
        ColumnManifestAccess::AddChunk(
            chunk, ColumnManifestAccess::FileNumber(chunk.file(), numbers, *out), *out);
      }
      out->first_chunk_.push_back(static_cast<uint32_t>(out->chunks_.size()));
    }
  }
  return out;
}

const v1::StoredChunk* ColumnManifest::encoded(uint32_t index) const {
  if (encoded_index_.empty()) return nullptr;
  auto it = std::lower_bound(encoded_index_.begin(), encoded_index_.end(), index);
  if (it == encoded_index_.end() || *it != index) return nullptr;
  return &encoded_[it - encoded_index_.begin()];
}

uint64_t ColumnManifest::MemoryBytes() const {
  uint64_t bytes = header_.SpaceUsedLong() + chunks_.capacity() * sizeof(Chunk) +
                   first_chunk_.capacity() * sizeof(uint32_t) +
                   tensors_.capacity() * sizeof(Tensor);
  for (const Tensor& t : tensors_) bytes += t.fqn.capacity() + t.shape.capacity() * sizeof(int64_t);
  for (const v1::ShardLayout& l : layouts_) bytes += l.SpaceUsedLong();
  for (const std::string& f : files_) bytes += sizeof(f) + f.capacity();
  for (const v1::StoredChunk& c : encoded_) bytes += c.SpaceUsedLong() + sizeof(uint32_t);
  return bytes;
}

std::string ColumnManifest::Difference(const ColumnManifest& other) const {
  v1::CheckpointManifest a = header_;
  v1::CheckpointManifest b = other.header_;
  a.clear_format_version();
  b.clear_format_version();
  if (!google::protobuf::util::MessageDifferencer::Equals(a, b)) return "the headers differ";
  if (tensors_.size() != other.tensors_.size()) return "the tensor counts differ";
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const Tensor& x = tensors_[t];
    const Tensor& y = other.tensors_[t];
    const std::string at = absl::StrCat("tensor ", t, " (", x.fqn, ")");
    if (x.fqn != y.fqn || x.dtype != y.dtype || x.shape != y.shape) {
      return absl::StrCat(at, ": name, dtype or shape");
    }
    const int shards = shards_of(x);
    if (shards != other.shards_of(y)) return absl::StrCat(at, ": shard counts");
    for (int k = 0; k < shards; ++k) {
      const std::string shard = absl::StrCat(at, " shard ", k);
      if (!google::protobuf::util::MessageDifferencer::Equals(
              layouts_[x.layout].regions(k), other.layouts_[y.layout].regions(k))) {
        return absl::StrCat(shard, ": region");
      }
      const uint32_t g = x.first_shard + static_cast<uint32_t>(k);
      const uint32_t h = y.first_shard + static_cast<uint32_t>(k);
      absl::Span<const Chunk> p = chunks_of(g);
      absl::Span<const Chunk> q = other.chunks_of(h);
      if (p.size() != q.size()) return absl::StrCat(shard, ": chunk counts");
      for (size_t c = 0; c < p.size(); ++c) {
        const std::string chunk = absl::StrCat(shard, " chunk ", c);
        if (p[c].file_offset != q[c].file_offset || p[c].shard_offset != q[c].shard_offset ||
            p[c].length != q[c].length || p[c].crc32c != q[c].crc32c ||
            files_[p[c].file] != other.files_[q[c].file]) {
          return absl::StrCat(chunk, ": its place, length, checksum or file");
        }
        const v1::StoredChunk* e = encoded(first_chunk_[g] + static_cast<uint32_t>(c));
        const v1::StoredChunk* f = other.encoded(other.first_chunk_[h] + static_cast<uint32_t>(c));
        if ((e == nullptr) != (f == nullptr) ||
            (e != nullptr && !google::protobuf::util::MessageDifferencer::Equals(*e, *f))) {
          return absl::StrCat(chunk, ": its encoding");
        }
      }
    }
  }
  return "";
}

}  // namespace ckpt::planning
