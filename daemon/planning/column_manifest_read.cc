#include "daemon/planning/column_manifest_read.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "daemon/planning/column_manifest_access.h"
#include "daemon/planning/compact_root.h"
#include "daemon/planning/manifest_io.h"
#include "proto/lib/geometry.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/stored_chunk.h"
#include "proto/lib/validation.h"

namespace ckpt::planning {
namespace {

using Access = ColumnManifestAccess;
using Chunk = ColumnManifest::Chunk;

// As ValidateManifest prints names.
std::string Quoted(absl::string_view text) { return QuotedForError(text); }

// Room to round any chunk's end up to any alignment (as ValidateManifest).
constexpr uint64_t kMaxEnd = uint64_t{1} << 62;

// Table row `i` as a whole chunk: for an encoded chunk or a delta only
// (a raw one is its row).
v1::StoredChunk RowChunk(const v1::ChunkTable& t, int i) {
  v1::StoredChunk c;
  c.set_file(t.file());
  c.set_file_offset(t.file_offset(i));
  c.set_shard_offset(t.shard_offset(i));
  c.set_length(t.length(i));
  c.set_crc32c(t.crc32c(i));
  if (t.codec_size() > 0) c.set_codec(t.codec(i));
  if (t.stored_length_size() > 0) c.set_stored_length(t.stored_length(i));
  if (t.stored_crc32c_size() > 0) c.set_stored_crc32c(t.stored_crc32c(i));
  if (t.element_bytes_size() > 0) c.set_element_bytes(t.element_bytes(i));
  if (t.delta_base_step_size() > 0) c.set_delta_base_step(t.delta_base_step(i));
  if (t.delta_base_size() > 0 && t.delta_base(i).ByteSizeLong() > 0) {
    *c.mutable_delta_base() = t.delta_base(i);
  }
  return c;
}

bool HasEncodingColumns(const v1::ChunkTable& t) {
  return t.codec_size() > 0 || t.stored_length_size() > 0 || t.stored_crc32c_size() > 0 ||
         t.element_bytes_size() > 0 || t.delta_base_step_size() > 0 || t.delta_base_size() > 0;
}

// Reads a compact root and its tables into columns.
class ColumnReader {
 public:
  ColumnReader(const v1::CheckpointManifest& root, absl::string_view source,
               const ManifestLimits& limits)
      : root_(root), source_(source), limits_(limits), out_(std::make_shared<ColumnManifest>()) {}

  absl::StatusOr<std::shared_ptr<const ColumnManifest>> Run(const ManifestFootprint& footprint,
                                                            uint64_t root_bytes,
                                                            absl::string_view job, int64_t step,
                                                            const ChunkTablesReader& read_tables) {
    if (absl::Status s = CheckCompactRoot(root_, source_, limits_).status(); !s.ok()) return s;
    if (absl::Status s = ValidateCompactRoot(root_, job, step, source_, limits_, object_extents_);
        !s.ok()) {
      return s;
    }
    if (root_.has_delta_base_step()) delta_base_step_ = root_.delta_base_step();
    if (absl::Status s = CheckTables(footprint, root_bytes); !s.ok()) return s;
    if (absl::Status s = FillTensors(); !s.ok()) return s;
    if (absl::Status s = ReadTables(read_tables); !s.ok()) return s;
    if (absl::Status s = CheckShardsTiled(); !s.ok()) return s;
    if (absl::Status s = CheckDisjoint(); !s.ok()) return s;
    Access::FillHeader(root_, *out_);
    std::vector<v1::ShardLayout>& layouts = Access::layouts(*out_);
    layouts.assign(root_.shard_layouts().begin(), root_.shard_layouts().end());
    // The encoded chunks by index, as ColumnManifest::encoded looks them up.
    std::sort(encoded_.begin(), encoded_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [index, chunk] : encoded_) {
      Access::encoded_index(*out_).push_back(index);
      Access::encoded(*out_).push_back(std::move(chunk));
    }
    return std::shared_ptr<const ColumnManifest>(std::move(out_));
  }

 private:
  absl::Status Lost(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(source_, ": ", what));
  }
  absl::Status OverMemory(uint64_t bytes) const {
    return ManifestReadOverMemory(source_, bytes, limits_);
  }

  // The tables' count, sizes and chunks against the limits, and the
  // columns' memory, before anything is read or allocated for them.
  absl::Status CheckTables(const ManifestFootprint& footprint, uint64_t root_bytes) {
    const int tables = root_.chunk_tables_size();
    if (tables == 0) return Lost("the split manifest lists no chunk table");
    if (root_bytes > limits_.max_manifest_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          source_, " is more than ", limits_.max_manifest_bytes, " bytes (--max_manifest_bytes)"));
    }
    uint64_t bytes = root_bytes;
    uint64_t chunks = 0;
    for (int i = 0; i < tables; ++i) {
      const v1::ChunkTableRef& ref = root_.chunk_tables(i);
      if (ref.chunks() == 0 || ref.bytes() < 4) {
        return Lost(absl::StrCat(ChunkTableName(static_cast<uint32_t>(i + 1)), " is listed with ",
                                 ref.chunks(), " chunks of ", ref.bytes(), " bytes"));
      }
      // Checked before each sum grows: neither wraps.
      if (ref.bytes() > limits_.max_manifest_bytes - bytes) {
        return absl::FailedPreconditionError(absl::StrCat(
            source_, ": the manifest and its chunk tables are more than ",
            limits_.max_manifest_bytes, " bytes (--max_manifest_bytes); they were not read"));
      }
      if (ref.chunks() > static_cast<uint64_t>(limits_.max_chunks) - chunks) {
        return absl::FailedPreconditionError(
            absl::StrCat(source_, ": the chunk tables list more than ", limits_.max_chunks,
                         " chunks (--max_manifest_chunks); they were not read"));
      }
      bytes += ref.bytes();
      chunks += ref.chunks();
    }
    uint64_t shards = 0;
    for (const v1::TensorEntry& tensor : root_.tensors()) shards += tensor.shard_tables_size();
    if (chunks >= UINT32_MAX || shards >= UINT32_MAX) {
      return absl::FailedPreconditionError(
          absl::StrCat(source_, ": the manifest holds ", shards, " shards and ", chunks,
                       " chunks, more than a load can number (2^32 - 1); it was not read"));
    }
    // The root as read, the columns, and per shard the reader's own two
    // numbers; each table run then adds its bytes and its parse.
    memory_ = SatAdd(footprint.ReadBytes(root_bytes),
                     SatAdd(SatMul(chunks, sizeof(Chunk) + 2 * sizeof(uint64_t)),
                            SatMul(shards, 3 * sizeof(uint32_t))));
    if (memory_ > limits_.max_memory_bytes) return OverMemory(memory_);
    offsets_ = ChunkTableOffsets(root_);
    total_chunks_ = static_cast<uint32_t>(chunks);
    return absl::OkStatus();
  }

  // Each shard's bytes in a tensor's shape, for a layout: worked out once
  // for each (layout, dtype, shape) the tensors have.
  struct Sizes {
    uint32_t layout = 0;
    v1::DType dtype = v1::DTYPE_UNSPECIFIED;
    const google::protobuf::RepeatedField<int64_t>* shape = nullptr;
    std::vector<uint64_t> shard_bytes;
  };

  // The shard sizes of tensor `tensor` (its layout's regions checked in
  // its shape), or why they cannot be.
  absl::StatusOr<uint32_t> SizesOf(const v1::TensorEntry& tensor) {
    const size_t hash =
        absl::HashOf(tensor.layout(), tensor.dtype(), absl::MakeConstSpan(tensor.global_shape()));
    std::vector<uint32_t>& alike = sizes_by_hash_[hash];
    for (uint32_t k : alike) {
      const Sizes& s = sizes_[k];
      if (s.layout == tensor.layout() && s.dtype == tensor.dtype() &&
          std::equal(s.shape->begin(), s.shape->end(), tensor.global_shape().begin(),
                     tensor.global_shape().end())) {
        return k;
      }
    }
    const std::string owner = absl::StrCat("tensor ", Quoted(tensor.fqn()));
    v1::TensorShard whole;
    whole.set_fqn(tensor.fqn());
    whole.set_dtype(tensor.dtype());
    *whole.mutable_global_shape() = tensor.global_shape();
    absl::StatusOr<ShardGeometry> geometry = ValidateShard(whole);
    if (!geometry.ok()) return Lost(absl::StrCat(geometry.status().message(), " (shard 0)"));
    Sizes sizes{tensor.layout(), tensor.dtype(), &tensor.global_shape(), {}};
    const v1::ShardLayout& layout = root_.shard_layouts(static_cast<int>(tensor.layout() - 1));
    sizes.shard_bytes.reserve(layout.regions_size());
    for (int i = 0; i < layout.regions_size(); ++i) {
      const v1::Region& region = layout.regions(i);
      if (region.box().offsets_size() > limits_.max_dims ||
          region.box().lengths_size() > limits_.max_dims) {
        return Lost(absl::StrCat(owner, " shard ", i,
                                 ": its box has more dimensions than the limit of ",
                                 limits_.max_dims));
      }
      absl::StatusOr<int64_t> elements =
          geo::RegionNumElements(geometry->shape, RegionFromProto(region));
      if (!elements.ok()) {
        return Lost(absl::StrCat("tensor ", tensor.fqn(), ": ", elements.status().message(),
                                 " (shard ", i, ")"));
      }
      // Cannot overflow: the region lies inside a shape whose byte size fits.
      sizes.shard_bytes.push_back(static_cast<uint64_t>(*elements * geometry->element_size));
    }
    alike.push_back(static_cast<uint32_t>(sizes_.size()));
    sizes_.push_back(std::move(sizes));
    return alike.back();
  }

  // The tensors, each shard's table checked against the table list, and
  // each shard's place in the columns.
  absl::Status FillTensors() {
    std::vector<ColumnManifest::Tensor>& tensors = Access::tensors(*out_);
    std::vector<uint32_t>& first_chunk = Access::first_chunk(*out_);
    tensors.reserve(root_.tensors_size());
    const int tables = root_.chunk_tables_size();
    std::vector<uint64_t> counted(tables, 0);
    uint64_t shards = 0;
    for (const v1::TensorEntry& entry : root_.tensors()) shards += entry.shard_tables_size();
    first_chunk.clear();  // one number per shard, then the end
    first_chunk.reserve(shards + 1);
    table_of_shard_.reserve(shards);
    sizes_of_tensor_.reserve(root_.tensors_size());
    uint64_t chunks = 0;
    for (const v1::TensorEntry& entry : root_.tensors()) {
      ColumnManifest::Tensor& tensor = tensors.emplace_back();
      tensor.fqn = entry.fqn();
      tensor.dtype = entry.dtype();
      tensor.shape.assign(entry.global_shape().begin(), entry.global_shape().end());
      tensor.first_shard = static_cast<uint32_t>(table_of_shard_.size());
      if (entry.global_shape_size() > limits_.max_dims) {
        return Lost(absl::StrCat("tensor ", Quoted(entry.fqn()), " has ", entry.global_shape_size(),
                                 " dimensions, more than the limit of ", limits_.max_dims));
      }
      uint32_t sizes = kNone;
      if (entry.layout() != 0 && entry.shard_tables_size() > 0) {
        absl::StatusOr<uint32_t> found = SizesOf(entry);
        if (!found.ok()) return found.status();
        sizes = *found;
        tensor.layout = entry.layout() - 1;
      }
      sizes_of_tensor_.push_back(sizes);
      for (int s = 0; s < entry.shard_tables_size(); ++s) {
        const uint32_t table = entry.shard_tables(s);
        const uint32_t count = entry.shard_chunk_counts(s);
        const uint64_t g = table_of_shard_.size();
        if (table == 0) {
          if (count != 0) {
            return Lost(absl::StrCat("shard ", g, " has ", count, " chunks and no chunk table"));
          }
        } else if (table > static_cast<uint32_t>(tables) || count == 0 ||
                   count > static_cast<uint32_t>(INT32_MAX)) {
          return Lost(absl::StrCat("shard ", g, " names chunk table ", table, " for ", count,
                                   " chunks (", tables, " tables)"));
        } else {
          counted[table - 1] += count;
        }
        table_of_shard_.push_back(table);
        first_chunk.push_back(static_cast<uint32_t>(chunks));
        chunks += count;
        if (chunks > total_chunks_) {
          return Lost(absl::StrCat("the shards put more chunks in the chunk tables than the ",
                                   total_chunks_, " they list"));
        }
      }
    }
    first_chunk.push_back(static_cast<uint32_t>(chunks));
    for (int i = 0; i < tables; ++i) {
      if (counted[i] != root_.chunk_tables(i).chunks()) {
        return Lost(absl::StrCat("the shards put ", counted[i], " chunks in ",
                                 ChunkTableName(static_cast<uint32_t>(i + 1)), ", which lists ",
                                 root_.chunk_tables(i).chunks()));
      }
    }
    next_.assign(first_chunk.begin(), first_chunk.end() - 1);
    Access::chunks(*out_).resize(chunks);
    return absl::OkStatus();
  }

  absl::Status ReadTables(const ChunkTablesReader& read_tables) {
    for (const auto& [first, end] : ChunkTableRuns(offsets_)) {
      const uint64_t run = offsets_[end] - offsets_[first];
      if (SatAdd(memory_, run) > limits_.max_memory_bytes) return OverMemory(SatAdd(memory_, run));
      absl::StatusOr<std::string> bytes = read_tables(offsets_[first], run, offsets_.back());
      if (!bytes.ok()) return bytes.status();
      if (bytes->size() != run) {
        return Lost(absl::StrCat(kChunkTablesFile, " is shorter than the root lists"));
      }
      for (int i = first; i < end; ++i) {
        const absl::string_view table = absl::string_view(*bytes).substr(
            offsets_[i] - offsets_[first], offsets_[i + 1] - offsets_[i]);
        if (absl::Status s = ReadTable(static_cast<uint32_t>(i + 1), table, run); !s.ok()) {
          return s;
        }
      }
    }
    return absl::OkStatus();
  }

  // Table `index` (1-based) checked and its rows put in their shards'
  // places, each chunk checked as ValidateManifest checks it.
  absl::Status ReadTable(uint32_t index, absl::string_view bytes, uint64_t run_bytes) {
    absl::StatusOr<ListedChunkTable> listed = ReadListedChunkTable(
        root_, index, bytes, source_, limits_,
        [&](uint64_t parsed) { return SatAdd(memory_, SatAdd(run_bytes, parsed)); });
    if (!listed.ok()) return listed.status();
    const v1::ChunkTable* const table = &listed->table;
    const std::string& where = listed->where;
    if (absl::Status s = ValidateConfinedName(table->file()); !s.ok()) {
      return absl::DataLossError(
          absl::StrCat(where, ": file ", Quoted(table->file()), ": ", s.message()));
    }
    const uint32_t file = Access::FileNumber(table->file(), files_, *out_);
    const bool encodings = HasEncodingColumns(*table);
    std::vector<Chunk>& chunks = Access::chunks(*out_);
    for (int i = 0; i < table->shard_size(); ++i) {
      const uint32_t g = table->shard(i);
      if (g >= table_of_shard_.size() || table_of_shard_[g] != index) {
        return absl::DataLossError(absl::StrCat(where, ": chunk ", i, " is of shard ", g,
                                                ", which the root does not put in this table"));
      }
      const uint32_t at = next_[g];
      if (at >= Access::first_chunk(*out_)[g + 1]) {
        return absl::DataLossError(absl::StrCat(
            where, ": shard ", g, " has more than its ",
            Access::first_chunk(*out_)[g + 1] - Access::first_chunk(*out_)[g], " chunks"));
      }
      const Chunk chunk{table->file_offset(i), table->shard_offset(i), table->length(i), file,
                        table->crc32c(i)};
      const auto name = [&] {
        return absl::StrCat(ShardName(g), " chunk ", at - Access::first_chunk(*out_)[g]);
      };
      if (chunk.length == 0) return Lost(absl::StrCat(name(), " is empty"));
      if (chunk.length > limits_.max_chunk_bytes) {
        return Lost(absl::StrCat(name(), " is ", chunk.length, " bytes, more than the limit of ",
                                 limits_.max_chunk_bytes));
      }
      if (chunk.file_offset > kMaxEnd || chunk.length > kMaxEnd - chunk.file_offset) {
        return Lost(absl::StrCat(name(), ": file offset ", chunk.file_offset, " + length ",
                                 chunk.length, " is beyond any file"));
      }
      if (encodings) {
        v1::StoredChunk whole = RowChunk(*table, i);
        if (absl::Status s = CheckChunkEncoding(whole, name()); !s.ok()) return Lost(s.message());
        if (whole.has_delta_base() &&
            (!delta_base_step_.has_value() || whole.delta_base_step() != *delta_base_step_)) {
          return Lost(absl::StrCat(name(), ": a delta against step ", whole.delta_base_step(),
                                   ", not the manifest's delta base"));
        }
        if (IsEncoded(whole) || whole.has_delta_base()) encoded_.emplace_back(at, std::move(whole));
      }
      chunks[at] = chunk;
      ++next_[g];
    }
    return absl::OkStatus();
  }

  // "tensor "<fqn>" shard <k>" for shard g (numbered over all tensors).
  std::string ShardName(uint32_t g) const {
    const std::vector<ColumnManifest::Tensor>& tensors = out_->tensors();
    auto it = std::upper_bound(
        tensors.begin(), tensors.end(), g,
        [](uint32_t shard, const ColumnManifest::Tensor& t) { return shard < t.first_shard; });
    // Shard g lies in a tensor: the first's first_shard is 0.
    --it;
    return absl::StrCat("tensor ", Quoted(it->fqn), " shard ", g - it->first_shard);
  }

  // Every shard got the chunks the root gives it, and they tile its bytes
  // in order (readers copy a chunk's bytes into the shard at its offset).
  absl::Status CheckShardsTiled() const {
    const std::vector<uint32_t>& first_chunk = Access::first_chunk(*out_);
    const std::vector<Chunk>& chunks = out_->all_chunks();
    for (uint32_t g = 0; g < next_.size(); ++g) {
      if (next_[g] != first_chunk[g + 1]) {
        return Lost(absl::StrCat("shard ", g, " has ", next_[g] - first_chunk[g],
                                 " chunks in its table, not the ",
                                 first_chunk[g + 1] - first_chunk[g], " the root gives"));
      }
    }
    const std::vector<ColumnManifest::Tensor>& tensors = out_->tensors();
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (sizes_of_tensor_[t] == kNone) continue;
      const std::vector<uint64_t>& bytes = sizes_[sizes_of_tensor_[t]].shard_bytes;
      for (uint32_t k = 0; k < bytes.size(); ++k) {
        const uint32_t g = tensors[t].first_shard + k;
        const auto where = [&] { return absl::StrCat(ShardName(g)); };
        const uint64_t shard_bytes = bytes[k];
        if (shard_bytes > 0 && first_chunk[g] == first_chunk[g + 1]) {
          return Lost(absl::StrCat(where(), " holds ", shard_bytes, " bytes but lists no chunks"));
        }
        uint64_t next = 0;
        for (uint32_t c = first_chunk[g]; c < first_chunk[g + 1]; ++c) {
          const Chunk& chunk = chunks[c];
          const auto at = [&] { return absl::StrCat(where(), " chunk ", c - first_chunk[g]); };
          if (chunk.shard_offset != next) {
            return Lost(absl::StrCat(at(), " starts at shard offset ", chunk.shard_offset,
                                     " where ", next,
                                     " was expected (chunks must be contiguous, in order, "
                                     "without gaps or overlaps)"));
          }
          if (chunk.length > shard_bytes - next) {
            return Lost(absl::StrCat(at(), " [", next, ", +", chunk.length,
                                     ") runs past the shard's ", shard_bytes, " bytes"));
          }
          next += chunk.length;
        }
        if (next != shard_bytes) {
          return Lost(absl::StrCat(where(), ": its chunks cover ", next, " of its ", shard_bytes,
                                   " bytes"));
        }
      }
    }
    return absl::OkStatus();
  }

  // No two chunks, objects' included, share a byte of a file (see
  // ValidateManifest's CheckDisjoint: readers hand the bytes at one place
  // to every chunk there).
  absl::Status CheckDisjoint() const {
    const std::vector<Chunk>& chunks = out_->all_chunks();
    const std::vector<std::string>& files = out_->files();
    // The objects' files numbered after the tensors'.
    absl::flat_hash_map<absl::string_view, uint32_t> number;
    for (uint32_t f = 0; f < files.size(); ++f) number.emplace(files[f], f);
    std::vector<absl::string_view> names(files.begin(), files.end());
    std::vector<uint32_t> object_file;
    object_file.reserve(object_extents_.size());
    for (const ChunkExtent& e : object_extents_) {
      auto [it, fresh] = number.try_emplace(e.file, static_cast<uint32_t>(names.size()));
      if (fresh) names.push_back(e.file);
      object_file.push_back(it->second);
    }
    // Each file's extents as (offset, owner): owner < chunks is a chunk,
    // chunks + k the k-th object's. Tables list a file's chunks in offset
    // order, so most files need no sort.
    const uint64_t n = chunks.size() + object_extents_.size();
    std::vector<uint32_t> first(names.size() + 1, 0);
    for (const Chunk& c : chunks) ++first[c.file + 1];
    for (uint32_t f : object_file) ++first[f + 1];
    for (size_t f = 0; f < names.size(); ++f) first[f + 1] += first[f];
    std::vector<std::pair<uint64_t, uint32_t>> by_file(n);
    {
      std::vector<uint32_t> next(first.begin(), first.end() - 1);
      for (uint32_t c = 0; c < chunks.size(); ++c) {
        by_file[next[chunks[c].file]++] = {chunks[c].file_offset, c};
      }
      for (uint32_t k = 0; k < object_file.size(); ++k) {
        by_file[next[object_file[k]]++] = {object_extents_[k].offset,
                                           static_cast<uint32_t>(chunks.size() + k)};
      }
    }
    const auto length = [&](uint32_t owner) {
      return owner < chunks.size() ? chunks[owner].length
                                   : object_extents_[owner - chunks.size()].length;
    };
    for (size_t f = 0; f < names.size(); ++f) {
      const auto begin = by_file.begin() + first[f];
      const auto end = by_file.begin() + first[f + 1];
      if (!std::is_sorted(begin, end)) std::sort(begin, end);
      for (auto it = begin + (begin == end ? 0 : 1); it < end; ++it) {
        if (it->first - (it - 1)->first < length((it - 1)->second)) {
          return Lost(absl::StrCat(OwnerName((it - 1)->second), " and ", OwnerName(it->second),
                                   " overlap in ", Quoted(names[f]), " at offset ", it->first,
                                   " (chunks may not share bytes)"));
        }
      }
    }
    return absl::OkStatus();
  }

  std::string OwnerName(uint32_t owner) const {
    const std::vector<Chunk>& chunks = out_->all_chunks();
    if (owner >= chunks.size()) {
      const v1::ObjectEntry& object = root_.objects(object_extents_[owner - chunks.size()].object);
      return absl::StrCat("object ", Quoted(object.key()), " of rank ", object.rank());
    }
    const std::vector<uint32_t>& first_chunk = Access::first_chunk(*out_);
    const auto it = std::upper_bound(first_chunk.begin(), first_chunk.end(), owner);
    const uint32_t g = static_cast<uint32_t>(it - first_chunk.begin()) - 1;
    const std::vector<ColumnManifest::Tensor>& tensors = out_->tensors();
    auto t = std::upper_bound(
        tensors.begin(), tensors.end(), g,
        [](uint32_t shard, const ColumnManifest::Tensor& x) { return shard < x.first_shard; });
    --t;
    return absl::StrCat("tensor ", Quoted(t->fqn));
  }

  static constexpr uint32_t kNone = ~uint32_t{0};

  const v1::CheckpointManifest& root_;
  const std::string source_;
  const ManifestLimits& limits_;
  std::shared_ptr<ColumnManifest> out_;
  uint64_t memory_ = 0;  // what the read holds, estimated
  std::vector<uint64_t> offsets_;
  uint32_t total_chunks_ = 0;
  std::optional<int64_t> delta_base_step_;
  std::vector<ChunkExtent> object_extents_;
  std::vector<Sizes> sizes_;
  absl::flat_hash_map<size_t, std::vector<uint32_t>> sizes_by_hash_;
  std::vector<uint32_t> sizes_of_tensor_;  // into sizes_; kNone: no shard
  std::vector<uint32_t> table_of_shard_;   // by shard over all tensors; 0: none
  std::vector<uint32_t> next_;             // by shard: its next chunk's place
  Access::FileNumbers files_;
  std::vector<std::pair<uint32_t, v1::StoredChunk>> encoded_;  // (index, chunk)
};

}  // namespace

absl::StatusOr<std::shared_ptr<const ColumnManifest>> ReadColumnManifest(
    v1::CheckpointManifest manifest, const ManifestFootprint& footprint, uint64_t manifest_bytes,
    absl::string_view job, int64_t step, absl::string_view source, const ManifestLimits& limits,
    const ChunkTablesReader& read_tables) {
  if (manifest.format_version() == kCompactRootFormatVersion) {
    return ColumnReader(manifest, source, limits)
        .Run(footprint, manifest_bytes, job, step, read_tables);
  }
  if (absl::Status s =
          JoinChunkTables(manifest, footprint, manifest_bytes, source, limits, read_tables);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateManifest(manifest, job, step, source, limits); !s.ok()) return s;
  return ColumnManifest::FromManifest(manifest);
}

}  // namespace ckpt::planning
