#include "daemon/planning/manifest_tables.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include <google/protobuf/arena.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/planning/compact_root.h"
#include "daemon/planning/manifest_footprint.h"
#include "daemon/planning/manifest_io.h"

namespace ckpt::planning {

std::string ChunkTableName(uint32_t index) {
  return absl::StrCat("chunk table ", index, " of ", kChunkTablesFile);
}

std::vector<uint64_t> ChunkTableOffsets(const v1::CheckpointManifest& root) {
  std::vector<uint64_t> offsets(1, 0);
  offsets.reserve(root.chunk_tables_size() + 1);
  for (const v1::ChunkTableRef& ref : root.chunk_tables()) {
    offsets.push_back(offsets.back() + ref.bytes());
  }
  return offsets;
}

std::vector<std::pair<int, int>> ChunkTableRuns(const std::vector<uint64_t>& offsets) {
  std::vector<std::pair<int, int>> runs;
  const int tables = static_cast<int>(offsets.size()) - 1;
  for (int first = 0; first < tables;) {
    int end = first + 1;
    const uint64_t bound = std::max(kTablesReadBytes, offsets[first + 1] - offsets[first]);
    while (end < tables && offsets[end + 1] - offsets[first] <= bound) ++end;
    runs.emplace_back(first, end);
    first = end;
  }
  return runs;
}

namespace {

// The root: every field but the tensor chunks, which become table entries,
// and in a compact root (format 3) the shards, which CompactShards adds.
// Field by field, so that a field added to the manifest and not here is
// dropped by a split; tests/unit (manifest_tables_test) fills every field
// and checks that a split and a join give the manifest back. The header:
// all but the tensors.
void FillRootHeader(const v1::CheckpointManifest& m, uint32_t format,
                    v1::CheckpointManifest& root) {
  root.set_format_version(format);
  root.set_job(m.job());
  root.set_step(m.step());
  root.set_created_unix_ms(m.created_unix_ms());
  if (m.has_topology()) *root.mutable_topology() = m.topology();
  *root.mutable_objects() = m.objects();
  *root.mutable_user_metadata() = m.user_metadata();
  if (m.has_delta_base_step()) root.set_delta_base_step(m.delta_base_step());
  root.set_delta_ordinal(m.delta_ordinal());
}

// A tensor's entry in the root.
v1::TensorEntry& AddRootTensor(const v1::TensorEntry& t, uint32_t format,
                               v1::CheckpointManifest& root) {
  v1::TensorEntry* out = root.add_tensors();
  out->set_fqn(t.fqn());
  out->set_dtype(t.dtype());
  *out->mutable_global_shape() = t.global_shape();
  out->set_partial(t.partial());
  if (format == kCompactRootFormatVersion) return *out;
  out->mutable_shards()->Reserve(t.shards_size());
  for (const v1::StoredShard& s : t.shards()) {
    v1::StoredShard* shard = out->add_shards();
    if (s.has_region()) *shard->mutable_region() = s.region();
    shard->set_writer_rank(s.writer_rank());
  }
  return *out;
}

bool EveryShardHasRegion(const v1::CheckpointManifest& m) {
  for (const v1::TensorEntry& t : m.tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      if (!s.has_region()) return false;
    }
  }
  return true;
}

// An optional column stays empty until a chunk has a value other than the
// default; then the rows before it get the default (a column is empty or
// full-length). Most checkpoints fill none: a million default messages
// and values were most of a split's time.
template <typename Column, typename Value>
void AddOptional(Column& column, int row, const Value& value) {
  if (column.empty() && value == Value{}) return;
  while (column.size() < row) column.Add(Value{});
  column.Add(value);
}

void AddRow(v1::ChunkTable& t, uint32_t shard, const v1::StoredChunk& c) {
  const int row = t.shard_size();
  t.add_shard(shard);
  t.add_file_offset(c.file_offset());
  t.add_shard_offset(c.shard_offset());
  t.add_length(c.length());
  t.add_crc32c(c.crc32c());
  AddOptional(*t.mutable_codec(), row, static_cast<int>(c.codec()));
  AddOptional(*t.mutable_stored_length(), row, c.stored_length());
  AddOptional(*t.mutable_stored_crc32c(), row, c.stored_crc32c());
  AddOptional(*t.mutable_element_bytes(), row, c.element_bytes());
  AddOptional(*t.mutable_delta_base_step(), row, c.delta_base_step());
  if (c.has_delta_base() || !t.delta_base().empty()) {
    while (t.delta_base_size() < row) t.add_delta_base();
    *t.add_delta_base() = c.delta_base();
  }
}

// The optional columns begun, filled to the table's length.
void PadOptionalColumns(v1::ChunkTable& t) {
  const int n = t.shard_size();
  const auto pad = [n](auto& column) {
    while (!column.empty() && column.size() < n) column.Add({});
  };
  pad(*t.mutable_codec());
  pad(*t.mutable_stored_length());
  pad(*t.mutable_stored_crc32c());
  pad(*t.mutable_element_bytes());
  pad(*t.mutable_delta_base_step());
  while (!t.delta_base().empty() && t.delta_base_size() < n) t.add_delta_base();
}

// The memory a join takes, as the join checks it, and as SplitManifest
// checks a split before it is written: a commit never writes a split its
// readers would refuse. Saturating: hostile sizes cannot wrap it.
class JoinMemory {
 public:
  // The root read (its bytes, its message and validation's sets, as
  // MeasureManifest estimates them from its bytes: the same for the reader
  // and the writer), and the join's own index of shards and tables.
  JoinMemory(uint64_t root_read_bytes, uint64_t shards, int tables)
      : base_(SatAdd(root_read_bytes,
                     SatAdd(SatMul(shards, sizeof(void*)),
                            SatMul(static_cast<uint64_t>(tables), 3 * sizeof(uint64_t))))) {}
  // Every chunk of a table, once joined.
  void AddChunks(const v1::ChunkTableRef& ref) {
    base_ = SatAdd(base_, SatMul(ref.chunks(), JoinedChunkBytes(ref.file().size())));
  }
  // While a table read in a run of `run_bytes` is joined: the run, the
  // table parsed, and the delta bases it moves into the chunks (at most
  // its parse again).
  uint64_t WithTable(uint64_t run_bytes, uint64_t parsed) const {
    return SatAdd(base_, SatAdd(run_bytes, SatMul(2, parsed)));
  }
  // After it: the delta bases stay.
  void Joined(uint64_t parsed) { base_ = SatAdd(base_, parsed); }
  uint64_t base() const { return base_; }

 private:
  uint64_t base_;
};

}  // namespace

absl::Status ManifestReadOverMemory(absl::string_view source, uint64_t bytes,
                                    const ManifestLimits& limits) {
  return absl::FailedPreconditionError(
      absl::StrCat(source, ": reading the manifest and its chunk tables would take about ",
                   bytes >> 20, " MiB of memory, more than the limit of ", limits.max_memory_bytes,
                   " bytes (--max_manifest_memory_bytes); it was not read"));
}

namespace {

absl::Status OverMemory(absl::string_view source, uint64_t bytes, const ManifestLimits& limits) {
  return ManifestReadOverMemory(source, bytes, limits);
}

// A split's files pass the join's checks of counts, sizes and memory.
bool Joinable(const SplitManifestFiles& files, const v1::CheckpointManifest& root, uint64_t shards,
              const ManifestLimits& limits) {
  absl::StatusOr<ManifestFootprint> footprint =
      MeasureManifest(absl::string_view(files.root).substr(0, files.root.size() - 4), "");
  if (!footprint.ok() || !CheckManifestFootprint(*footprint, files.root.size(), "", limits).ok()) {
    return false;
  }
  uint64_t root_bytes = footprint->ReadBytes(files.root.size());
  if (root.format_version() == kCompactRootFormatVersion) {
    absl::StatusOr<uint64_t> expanded = CheckCompactRoot(root, "", limits);
    if (!expanded.ok()) return false;
    root_bytes = SatAdd(root_bytes, *expanded);
  }
  JoinMemory memory(root_bytes, shards, root.chunk_tables_size());
  uint64_t bytes = files.root.size();
  uint64_t chunks = 0;
  for (const v1::ChunkTableRef& ref : root.chunk_tables()) {
    bytes = SatAdd(bytes, ref.bytes());
    chunks = SatAdd(chunks, ref.chunks());
    memory.AddChunks(ref);
  }
  if (bytes > limits.max_manifest_bytes || chunks > static_cast<uint64_t>(limits.max_chunks)) {
    return false;
  }
  const std::vector<uint64_t> offsets = ChunkTableOffsets(root);
  for (const auto& [first, end] : ChunkTableRuns(offsets)) {
    const uint64_t run = offsets[end] - offsets[first];
    if (SatAdd(memory.base(), run) > limits.max_memory_bytes) return false;
    for (int i = first; i < end; ++i) {
      const std::string& table = files.tables[i];
      absl::StatusOr<ManifestFootprint> parsed =
          MeasureChunkTable(absl::string_view(table).substr(0, table.size() - 4), "");
      if (!parsed.ok() || memory.WithTable(run, parsed->parsed_bytes) > limits.max_memory_bytes) {
        return false;
      }
      memory.Joined(parsed->parsed_bytes);
    }
  }
  return true;
}

}  // namespace

ManifestSplitter::ManifestSplitter(uint32_t root_format)
    : format_(root_format),
      arena_(std::make_unique<google::protobuf::Arena>()),
      root_(google::protobuf::Arena::CreateMessage<v1::CheckpointManifest>(arena_.get())) {
  if (format_ != kSplitManifestFormatVersion && format_ != kCompactRootFormatVersion) {
    failed_ = true;
  }
}

ManifestSplitter::~ManifestSplitter() = default;

bool ManifestSplitter::Add(const v1::TensorEntry& tensor) {
  if (failed_) return false;
  v1::TensorEntry& out = AddRootTensor(tensor, format_, *root_);
  places_.assign(static_cast<size_t>(tensor.shards_size()), ShardPlace());
  for (int s = 0; s < tensor.shards_size(); ++s, ++shard_number_) {
    const v1::StoredShard& shard = tensor.shards(s);
    // A layout lists regions, set or empty: a shard whose region is unset
    // (no writer leaves one so) keeps it unset only in a format-2 root.
    if (format_ == kCompactRootFormatVersion && !shard.has_region()) failed_ = true;
    if (failed_ || shard.chunks_size() == 0) continue;
    const std::string& file = shard.chunks(0).file();
    auto [it, inserted] = table_of_file_.try_emplace(file, tables_.size() + 1);
    if (inserted) {
      tables_.push_back(google::protobuf::Arena::CreateMessage<v1::ChunkTable>(arena_.get()));
      tables_.back()->set_file(file);
    }
    v1::ChunkTable& table = *tables_[it->second - 1];
    for (const v1::StoredChunk& chunk : shard.chunks()) {
      if (chunk.file() != file) failed_ = true;  // one table per shard
      AddRow(table, shard_number_, chunk);
    }
    ShardPlace& place = places_[static_cast<size_t>(s)];
    place.table = it->second;
    place.chunks = static_cast<uint32_t>(shard.chunks_size());
    if (format_ == kSplitManifestFormatVersion) {
      v1::StoredShard& listed = *out.mutable_shards(s);
      listed.set_table(place.table);
      listed.set_chunk_count(place.chunks);
    }
  }
  if (failed_) return false;
  if (format_ == kCompactRootFormatVersion) compact_.Fill(tensor, places_, out, *root_);
  return true;
}

std::optional<SplitManifestFiles> ManifestSplitter::Finish(const v1::CheckpointManifest& header,
                                                           const ManifestLimits& limits) {
  if (failed_ || tables_.empty()) return std::nullopt;
  failed_ = true;  // once
  v1::CheckpointManifest& root = *root_;
  FillRootHeader(header, format_, root);
  SplitManifestFiles files;
  files.tables.reserve(tables_.size());
  for (v1::ChunkTable* t : tables_) {
    v1::ChunkTable& table = *t;
    PadOptionalColumns(table);
    v1::ChunkTableRef* ref = root.add_chunk_tables();
    ref->set_file(table.file());
    ref->set_chunks(static_cast<uint64_t>(table.shard_size()));
    files.tables.push_back(WithCrcTrailer(table.SerializeAsString()));
    ref->set_bytes(files.tables.back().size());
    ref->set_crc32c(TrailerCrc(files.tables.back()));
    table.Clear();  // its columns are in its bytes now
  }
  files.root = EncodeManifest(root);
  if (!Joinable(files, root, shard_number_, limits)) return std::nullopt;
  return files;
}

std::optional<SplitManifestFiles> SplitManifest(const v1::CheckpointManifest& manifest,
                                                const ManifestLimits& limits,
                                                uint32_t root_format) {
  if (root_format == kCompactRootFormatVersion && !EveryShardHasRegion(manifest)) {
    root_format = kSplitManifestFormatVersion;
  }
  ManifestSplitter splitter(root_format);
  for (const v1::TensorEntry& tensor : manifest.tensors()) {
    if (!splitter.Add(tensor)) return std::nullopt;
  }
  return splitter.Finish(manifest, limits);
}

namespace {

// A table's payload (its trailer checked, its parse measured and allowed)
// parsed, and its columns checked.
absl::StatusOr<v1::ChunkTable> ParseChunkTable(absl::string_view payload, absl::string_view source,
                                               const ManifestLimits& limits) {
  v1::ChunkTable table;
  if (!table.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(absl::StrCat(source, ": chunk table does not parse"));
  }
  const int n = table.shard_size();
  if (n == 0) return absl::DataLossError(absl::StrCat(source, ": chunk table lists no chunk"));
  if (n > limits.max_chunks) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": the chunk table lists ", n, " chunks, more than the limit of ",
                     limits.max_chunks, " (--max_manifest_chunks)"));
  }
  const std::pair<const char*, int> required[] = {{"file_offset", table.file_offset_size()},
                                                  {"shard_offset", table.shard_offset_size()},
                                                  {"length", table.length_size()},
                                                  {"crc32c", table.crc32c_size()}};
  for (const auto& [column, size] : required) {
    if (size != n) {
      return absl::DataLossError(absl::StrCat(source, ": chunk table column ", column, " has ",
                                              size, " values for ", n, " chunks"));
    }
  }
  const std::pair<const char*, int> optional[] = {{"codec", table.codec_size()},
                                                  {"stored_length", table.stored_length_size()},
                                                  {"stored_crc32c", table.stored_crc32c_size()},
                                                  {"element_bytes", table.element_bytes_size()},
                                                  {"delta_base_step", table.delta_base_step_size()},
                                                  {"delta_base", table.delta_base_size()}};
  for (const auto& [column, size] : optional) {
    if (size != 0 && size != n) {
      return absl::DataLossError(absl::StrCat(source, ": chunk table column ", column, " has ",
                                              size, " values for ", n, " chunks (0 or ", n,
                                              " expected)"));
    }
  }
  return table;
}

}  // namespace

absl::StatusOr<v1::ChunkTable> DecodeChunkTable(absl::string_view bytes, absl::string_view source,
                                                const ManifestLimits& limits) {
  absl::StatusOr<absl::string_view> payload = CheckedPayload(bytes, source, "chunk table");
  if (!payload.ok()) return payload.status();
  absl::StatusOr<ManifestFootprint> footprint = MeasureChunkTable(*payload, source);
  if (!footprint.ok()) return footprint.status();
  if (bytes.size() + footprint->parsed_bytes > limits.max_memory_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        source, ": reading the chunk table would take about ",
        (bytes.size() + footprint->parsed_bytes) >> 20, " MiB of memory, more than the limit of ",
        limits.max_memory_bytes, " bytes (--max_manifest_memory_bytes); it was not parsed"));
  }
  return ParseChunkTable(*payload, source, limits);
}

namespace {

// A table's row `i` as the chunk a format-1 manifest lists.
void FillChunk(v1::ChunkTable& t, int i, v1::StoredChunk& c) {
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
  // Empty where the chunk has none (a column is full-length or empty).
  if (t.delta_base_size() > 0 && t.delta_base(i).ByteSizeLong() > 0) {
    c.mutable_delta_base()->Swap(t.mutable_delta_base(i));
  }
}

}  // namespace

absl::StatusOr<ListedChunkTable> ReadListedChunkTable(
    const v1::CheckpointManifest& root, uint32_t index, absl::string_view bytes,
    absl::string_view source, const ManifestLimits& limits,
    absl::FunctionRef<uint64_t(uint64_t parsed_bytes)> memory_with) {
  const v1::ChunkTableRef& ref = root.chunk_tables(static_cast<int>(index - 1));
  const std::string where = absl::StrCat(source, " (", ChunkTableName(index), ")");
  // Its size is the root's by construction (sliced by the root's sizes).
  if (TrailerCrc(bytes) != ref.crc32c()) {
    return absl::DataLossError(absl::StrCat(where,
                                            ": the chunk table is not the one the root "
                                            "lists (its size or checksum differs)"));
  }
  absl::StatusOr<absl::string_view> payload = CheckedPayload(bytes, where, "chunk table");
  if (!payload.ok()) return payload.status();
  absl::StatusOr<ManifestFootprint> footprint = MeasureChunkTable(*payload, where);
  if (!footprint.ok()) return footprint.status();
  const uint64_t reading = memory_with(footprint->parsed_bytes);
  if (reading > limits.max_memory_bytes) return OverMemory(where, reading, limits);
  absl::StatusOr<v1::ChunkTable> table = ParseChunkTable(*payload, where, limits);
  if (!table.ok()) return table.status();
  if (table->file() != ref.file()) {
    return absl::DataLossError(absl::StrCat(where, ": the chunk table is of another file"));
  }
  if (static_cast<uint64_t>(table->shard_size()) != ref.chunks()) {
    return absl::DataLossError(absl::StrCat(where, ": the chunk table lists ", table->shard_size(),
                                            " chunks, the root ", ref.chunks()));
  }
  return ListedChunkTable{*std::move(table), footprint->parsed_bytes, where};
}

namespace {

class Joiner {
 public:
  Joiner(v1::CheckpointManifest& m, absl::string_view source, const ManifestLimits& limits)
      : m_(m), source_(source), limits_(limits) {}

  // `expanded`: the memory a compact root's shards took (compact_root.h).
  absl::Status Run(const ManifestFootprint& root, uint64_t root_bytes, uint64_t expanded,
                   const ChunkTablesReader& read_tables) {
    if (absl::Status s = CheckRoot(root, root_bytes, expanded); !s.ok()) return s;
    for (const auto& [first, end] : ChunkTableRuns(offsets_)) {
      const uint64_t run = offsets_[end] - offsets_[first];
      if (SatAdd(memory_->base(), run) > limits_.max_memory_bytes) {
        return OverMemory(source_, SatAdd(memory_->base(), run), limits_);
      }
      absl::StatusOr<std::string> bytes = read_tables(offsets_[first], run, offsets_.back());
      if (!bytes.ok()) return bytes.status();
      if (bytes->size() != run) {
        return Lost(absl::StrCat(kChunkTablesFile, " is shorter than the root lists"));
      }
      for (int i = first; i < end; ++i) {
        const absl::string_view table =
            absl::string_view(*bytes).substr(offsets_[i] - offsets_[first], TableBytes(i));
        if (absl::Status s = JoinTable(static_cast<uint32_t>(i + 1), table, run); !s.ok()) {
          return s;
        }
      }
    }
    for (size_t g = 0; g < shards_.size(); ++g) {
      v1::StoredShard& shard = *shards_[g];
      if (static_cast<uint32_t>(shard.chunks_size()) != shard.chunk_count()) {
        return Lost(absl::StrCat("shard ", g, " has ", shard.chunks_size(),
                                 " chunks in its table, not the ", shard.chunk_count(),
                                 " the root gives"));
      }
      shard.clear_table();
      shard.clear_chunk_count();
    }
    m_.clear_chunk_tables();
    m_.set_format_version(kManifestFormatVersion);
    return absl::OkStatus();
  }

 private:
  absl::Status Lost(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(source_, ": ", what));
  }

  uint64_t TableBytes(int i) const { return offsets_[i + 1] - offsets_[i]; }

  // Counts, sizes and the memory of the joined manifest, before any table
  // is read; each shard's table and chunk count against the table list.
  absl::Status CheckRoot(const ManifestFootprint& root, uint64_t root_bytes, uint64_t expanded) {
    const int tables = m_.chunk_tables_size();
    if (tables == 0) return Lost("the split manifest lists no chunk table");
    if (root_bytes > limits_.max_manifest_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          source_, " is more than ", limits_.max_manifest_bytes, " bytes (--max_manifest_bytes)"));
    }
    uint64_t bytes = root_bytes;
    uint64_t chunks = 0;
    uint64_t shards = 0;
    for (const v1::TensorEntry& tensor : m_.tensors()) shards += tensor.shards_size();
    memory_.emplace(SatAdd(root.ReadBytes(root_bytes), expanded), shards, tables);
    for (int i = 0; i < tables; ++i) {
      const v1::ChunkTableRef& ref = m_.chunk_tables(i);
      const std::string name = ChunkTableName(static_cast<uint32_t>(i + 1));
      if (ref.chunks() == 0 || ref.bytes() < 4) {
        return Lost(absl::StrCat(name, " is listed with ", ref.chunks(), " chunks of ", ref.bytes(),
                                 " bytes"));
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
      memory_->AddChunks(ref);
    }
    offsets_ = ChunkTableOffsets(m_);
    if (memory_->base() > limits_.max_memory_bytes) {
      return OverMemory(source_, memory_->base(), limits_);
    }
    std::vector<uint64_t> counted(tables, 0);
    for (v1::TensorEntry& tensor : *m_.mutable_tensors()) {
      for (v1::StoredShard& shard : *tensor.mutable_shards()) {
        const size_t g = shards_.size();
        shards_.push_back(&shard);
        if (shard.chunks_size() > 0) {
          return Lost(absl::StrCat("shard ", g, " of tensor \"",
                                   absl::CHexEscape(tensor.fqn().substr(0, 80)),
                                   "\" lists chunks in a split manifest's root"));
        }
        if (shard.table() == 0) {
          if (shard.chunk_count() != 0) {
            return Lost(absl::StrCat("shard ", g, " has ", shard.chunk_count(),
                                     " chunks and no chunk table"));
          }
          continue;
        }
        if (shard.table() > static_cast<uint32_t>(tables) || shard.chunk_count() == 0 ||
            shard.chunk_count() > static_cast<uint32_t>(INT32_MAX)) {
          return Lost(absl::StrCat("shard ", g, " names chunk table ", shard.table(), " for ",
                                   shard.chunk_count(), " chunks (", tables, " tables)"));
        }
        counted[shard.table() - 1] += shard.chunk_count();
      }
    }
    for (int i = 0; i < tables; ++i) {
      if (counted[i] != m_.chunk_tables(i).chunks()) {
        return Lost(absl::StrCat("the shards put ", counted[i], " chunks in ",
                                 ChunkTableName(static_cast<uint32_t>(i + 1)), ", which lists ",
                                 m_.chunk_tables(i).chunks()));
      }
    }
    for (v1::StoredShard* shard : shards_) {
      shard->mutable_chunks()->Reserve(static_cast<int>(shard->chunk_count()));
    }
    return absl::OkStatus();
  }

  absl::Status JoinTable(uint32_t index, absl::string_view bytes, uint64_t run_bytes) {
    absl::StatusOr<ListedChunkTable> listed = ReadListedChunkTable(
        m_, index, bytes, source_, limits_,
        [&](uint64_t parsed) { return memory_->WithTable(run_bytes, parsed); });
    if (!listed.ok()) return listed.status();
    v1::ChunkTable* const table = &listed->table;
    const std::string& where = listed->where;
    for (int i = 0; i < table->shard_size(); ++i) {
      const uint32_t g = table->shard(i);
      if (g >= shards_.size() || shards_[g]->table() != index) {
        return absl::DataLossError(absl::StrCat(where, ": chunk ", i, " is of shard ", g,
                                                ", which the root does not put in this table"));
      }
      v1::StoredShard& shard = *shards_[g];
      if (static_cast<uint32_t>(shard.chunks_size()) >= shard.chunk_count()) {
        return absl::DataLossError(absl::StrCat(where, ": shard ", g, " has more than its ",
                                                shard.chunk_count(), " chunks"));
      }
      FillChunk(*table, i, *shard.add_chunks());
    }
    memory_->Joined(listed->parsed_bytes);
    return absl::OkStatus();
  }

  v1::CheckpointManifest& m_;
  const absl::string_view source_;
  const ManifestLimits& limits_;
  std::vector<v1::StoredShard*> shards_;  // over all tensors, as tables number them
  std::vector<uint64_t> offsets_;         // TableOffsets
  std::optional<JoinMemory> memory_;      // set by CheckRoot
};

}  // namespace

absl::Status JoinChunkTables(v1::CheckpointManifest& manifest, const ManifestFootprint& root,
                             uint64_t root_bytes, absl::string_view source,
                             const ManifestLimits& limits, const ChunkTablesReader& read_tables) {
  uint64_t expanded = 0;
  if (manifest.format_version() == kCompactRootFormatVersion) {
    // Checked, and its memory allowed, before a shard is added.
    absl::StatusOr<uint64_t> bytes = CheckCompactRoot(manifest, source, limits);
    if (!bytes.ok()) return bytes.status();
    const uint64_t total = SatAdd(root.ReadBytes(root_bytes), *bytes);
    if (total > limits.max_memory_bytes) return OverMemory(source, total, limits);
    ExpandCompactRoot(manifest);
    expanded = *bytes;
  }
  if (manifest.format_version() != kSplitManifestFormatVersion) return absl::OkStatus();
  return Joiner(manifest, source, limits).Run(root, root_bytes, expanded, read_tables);
}

}  // namespace ckpt::planning
