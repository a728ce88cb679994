#include "daemon/planning/manifest_check.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/planning/compact_root.h"
#include "daemon/planning/parallel_for.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/stored_chunk.h"
#include "proto/lib/validation.h"

namespace ckpt::planning {

std::string QuotedForError(absl::string_view text) {
  constexpr size_t kMax = 80;
  std::string out = absl::CHexEscape(text.substr(0, kMax));
  if (text.size() > kMax) absl::StrAppend(&out, "...");
  return absl::StrCat("\"", out, "\"");
}

namespace {

std::string Quoted(absl::string_view text) { return QuotedForError(text); }

class Checker {
 public:
  Checker(absl::string_view source, const ManifestLimits& limits)
      : source_(source), limits_(limits) {}

  // A save plan's manifest whose tensor shards will list `chunks` chunks.
  void ExpectPlannedChunks(int64_t chunks) {
    planned_ = true;
    planned_chunks_ = chunks;
  }

  absl::Status Run(const v1::CheckpointManifest& m, absl::string_view job, int64_t step,
                   int threads) {
    if (m.format_version() != kManifestFormatVersion) {
      // A split manifest's root (format 2) is checked once its chunk
      // tables are joined into it (manifest_tables.h).
      return Lost(absl::StrCat("format version ", m.format_version(), " is not the supported ",
                               kManifestFormatVersion,
                               " (a split manifest's root is checked once "
                               "its chunk tables are joined)"));
    }
    if (m.shard_layouts_size() > 0 && !planned_) {
      return Lost(absl::StrCat("it lists ", m.shard_layouts_size(),
                               " shard layouts, which only a compact root does"));
    }
    if (m.chunk_tables_size() > 0) {
      return Lost("it lists chunk tables but is not a split manifest (format 2)");
    }
    if (absl::Status s = CheckHeader(m, job, step); !s.ok()) return s;
    if (absl::Status s = CheckTensors(m, threads); !s.ok()) return s;
    if (absl::Status s = CheckObjects(m); !s.ok()) return s;
    return CheckDisjoint(m);
  }

  // A compact root's checks before its tables are read (ValidateCompactRoot).
  absl::Status RunRoot(const v1::CheckpointManifest& m, absl::string_view job, int64_t step,
                       std::vector<ChunkExtent>& object_extents) {
    if (m.format_version() != kCompactRootFormatVersion) {
      return Lost(absl::StrCat("format version ", m.format_version(), " is not a compact root's (",
                               kCompactRootFormatVersion, ")"));
    }
    if (absl::Status s = CheckHeader(m, job, step); !s.ok()) return s;
    if (absl::Status s = CheckObjects(m); !s.ok()) return s;
    object_extents.reserve(extents_.size());
    for (const Extent& e : extents_) {
      object_extents.push_back(ChunkExtent{e.file, e.offset, e.length, e.object});
    }
    return absl::OkStatus();
  }

 private:
  // Job and step, the counts of tensors and objects, the metadata, the
  // delta base, and no tensor named twice.
  absl::Status CheckHeader(const v1::CheckpointManifest& m, absl::string_view job, int64_t step) {
    if (m.job() != job || m.step() != step) {
      return absl::FailedPreconditionError(
          absl::StrCat(source_, ": the manifest is of job ", Quoted(m.job()), " step ", m.step(),
                       ", not of job ", job, " step ", step,
                       " whose directory holds it (a copied or moved checkpoint directory?)"));
    }
    if (absl::Status s = CheckCount("tensors", m.tensors_size(), limits_.max_tensors); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckCount("objects", m.objects_size(), limits_.max_objects); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckMetadata(m); !s.ok()) return s;
    if (m.has_delta_base_step()) {
      if (m.delta_base_step() < 0 || m.delta_base_step() >= m.step()) {
        return Lost(
            absl::StrCat("its delta base is step ", m.delta_base_step(), ", not an earlier step"));
      }
      if (m.delta_ordinal() < 1) {
        return Lost(absl::StrCat("its delta ordinal is ", m.delta_ordinal(), ", not 1 or more"));
      }
      delta_base_step_ = m.delta_base_step();
    }
    std::set<absl::string_view> fqns;
    for (int t = 0; t < m.tensors_size(); ++t) {
      const v1::TensorEntry& tensor = m.tensors(t);
      if (!fqns.insert(tensor.fqn()).second) {
        return Lost(absl::StrCat("tensor ", Quoted(tensor.fqn()), " is listed twice"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckObjects(const v1::CheckpointManifest& m) {
    std::set<std::pair<absl::string_view, int>> objects;
    for (int o = 0; o < m.objects_size(); ++o) {
      const v1::ObjectEntry& object = m.objects(o);
      if (!objects.insert({object.key(), object.rank()}).second) {
        return Lost(absl::StrCat("object ", Quoted(object.key()), " of rank ", object.rank(),
                                 " is listed twice"));
      }
      owner_ = {.object = o};
      if (absl::Status s = CheckObject(object); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Lost(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(source_, ": ", what));
  }

  absl::Status CheckCount(absl::string_view what, int64_t count, int64_t limit) const {
    if (count <= limit) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(source_, ": the manifest holds ", count, " ",
                                                      what, ", more than the limit of ", limit));
  }

  absl::Status CheckMetadata(const v1::CheckpointManifest& m) const {
    if (absl::Status s = CheckCount("user metadata entries", m.user_metadata_size(),
                                    limits_.max_metadata_entries);
        !s.ok()) {
      return s;
    }
    uint64_t bytes = 0;
    for (const auto& [key, value] : m.user_metadata()) bytes += key.size() + value.size();
    if (bytes > limits_.max_metadata_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          source_, ": the manifest holds ", bytes,
          " bytes of user metadata, more than the limit of ", limits_.max_metadata_bytes));
    }
    return absl::OkStatus();
  }

  // Every tensor's shards, on up to `threads` threads (parallel_for.h): a
  // cluster's manifest has millions. The counts are bounded first, so a
  // part of the tensors checked alone cannot pass its bound unnoticed;
  // each part's checker records its chunks' extents, joined in tensor
  // order, and of several parts that fail, the first tensor's error is
  // the one named, as one thread would have.
  absl::Status CheckTensors(const v1::CheckpointManifest& m, int threads) {
    int64_t shards = 0;
    int64_t chunks = 0;
    for (const v1::TensorEntry& tensor : m.tensors()) {
      shards += tensor.shards_size();
      for (const v1::StoredShard& shard : tensor.shards()) chunks += shard.chunks_size();
      if (planned_ && tensor.layout() > 0 &&
          tensor.layout() <= static_cast<uint32_t>(m.shard_layouts_size())) {
        shards += m.shard_layouts(static_cast<int>(tensor.layout() - 1)).regions_size();
      }
    }
    chunks += planned_chunks_;
    if (absl::Status s = CheckCount("shards", shards, limits_.max_shards); !s.ok()) return s;
    if (absl::Status s = CheckCount("chunks", chunks, limits_.max_chunks); !s.ok()) return s;
    // Part k checks the k-th range of tensors.
    std::vector<std::unique_ptr<Checker>> parts(std::max(1, threads));
    std::vector<absl::Status> errors(parts.size());
    const size_t ranges =
        ParallelFor(static_cast<size_t>(m.tensors_size()), threads, static_cast<uint64_t>(shards),
                    kMinWorkPerRange, [&](size_t range, size_t begin, size_t end) {
                      auto part = std::make_unique<Checker>(source_, limits_);
                      part->delta_base_step_ = delta_base_step_;
                      part->planned_ = planned_;
                      for (size_t t = begin; t < end && errors[range].ok(); ++t) {
                        part->owner_ = {.tensor = static_cast<int>(t)};
                        errors[range] = part->CheckTensor(m, m.tensors(static_cast<int>(t)));
                      }
                      parts[range] = std::move(part);
                    });
    for (size_t p = 0; p < ranges; ++p) {
      if (!errors[p].ok()) return errors[p];
    }
    size_t extents = extents_.size();
    for (size_t p = 0; p < ranges; ++p) extents += parts[p]->extents_.size();
    extents_.reserve(extents);
    for (size_t p = 0; p < ranges; ++p) {
      extents_.insert(extents_.end(), parts[p]->extents_.begin(), parts[p]->extents_.end());
    }
    shards_ = shards;
    chunks_ = chunks;
    return absl::OkStatus();
  }

  absl::Status CheckTensor(const v1::CheckpointManifest& m, const v1::TensorEntry& tensor) {
    const std::string owner = absl::StrCat("tensor ", Quoted(tensor.fqn()));
    // A compact root's columns are expanded away before a check
    // (compact_root.h): here they would be shards that nothing checks. A
    // save plan's template names a layout for its shards' regions
    // (planned_manifest.h).
    if ((tensor.layout() != 0 && !planned_) || tensor.shard_tables_size() > 0 ||
        tensor.shard_chunk_counts_size() > 0 || tensor.shard_writer_ranks_size() > 0) {
      return Lost(absl::StrCat(owner, " has a compact root's shard layout and columns"));
    }
    const v1::ShardLayout* layout = nullptr;
    if (tensor.layout() != 0) {
      if (tensor.layout() > static_cast<uint32_t>(m.shard_layouts_size()) ||
          !tensor.shards().empty()) {
        return Lost(absl::StrCat(owner, " names layout ", tensor.layout(), " of ",
                                 m.shard_layouts_size(), " and lists ", tensor.shards_size(),
                                 " shards of its own"));
      }
      layout = &m.shard_layouts(static_cast<int>(tensor.layout() - 1));
    }
    if (tensor.global_shape_size() > limits_.max_dims) {
      return Lost(absl::StrCat(owner, " has ", tensor.global_shape_size(),
                               " dimensions, more than the limit of ", limits_.max_dims));
    }
    const int count = layout != nullptr ? layout->regions_size() : tensor.shards_size();
    shards_ += count;
    if (absl::Status s = CheckCount("shards", shards_, limits_.max_shards); !s.ok()) return s;
    if (count == 0) return absl::OkStatus();
    // Name, dtype and shape once; then each shard's region in that shape
    // (a cluster's manifest has a million shards).
    v1::TensorShard whole;
    whole.set_fqn(tensor.fqn());
    whole.set_dtype(tensor.dtype());
    *whole.mutable_global_shape() = tensor.global_shape();
    absl::StatusOr<ShardGeometry> tensor_geometry = ValidateShard(whole);
    if (!tensor_geometry.ok()) {
      // The message names the tensor already.
      return Lost(absl::StrCat(tensor_geometry.status().message(), " (shard 0)"));
    }
    const geo::Shape& shape = tensor_geometry->shape;
    for (int i = 0; i < count; ++i) {
      const v1::Region& region = layout != nullptr ? layout->regions(i) : tensor.shards(i).region();
      // Built only for an error: a cluster's manifest has millions of shards.
      const auto where = [&] { return absl::StrCat(owner, " shard ", i); };
      if (layout == nullptr &&
          (tensor.shards(i).table() != 0 || tensor.shards(i).chunk_count() != 0)) {
        return Lost(absl::StrCat(where(), " names a chunk table outside a split manifest"));
      }
      if (region.box().offsets_size() > limits_.max_dims ||
          region.box().lengths_size() > limits_.max_dims) {
        return Lost(absl::StrCat(where(), ": its box has more dimensions than the limit of ",
                                 limits_.max_dims));
      }
      absl::StatusOr<int64_t> elements = geo::RegionNumElements(shape, RegionFromProto(region));
      if (!elements.ok()) {
        return Lost(absl::StrCat("tensor ", tensor.fqn(), ": ", elements.status().message(),
                                 " (shard ", i, ")"));
      }
      if (planned_) {
        if (layout == nullptr && !tensor.shards(i).chunks().empty()) {
          return Lost(absl::StrCat(where(), " lists planned chunks"));
        }
        continue;
      }
      const v1::StoredShard& shard = tensor.shards(i);
      // Cannot overflow: the region lies inside a shape whose byte size fits.
      const int64_t bytes = *elements * tensor_geometry->element_size;
      if (absl::Status s = CheckChunks(shard, static_cast<uint64_t>(bytes), where); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  // The chunks tile [0, shard_bytes) in order: the first starts at 0, each
  // starts where the previous ended, none is empty, and the last ends at
  // shard_bytes. Readers copy `length` bytes of a chunk into the shard at
  // shard_offset, so anything else would read or write outside it.
  template <typename Where>
  absl::Status CheckChunks(const v1::StoredShard& shard, uint64_t shard_bytes, const Where& where) {
    chunks_ += shard.chunks_size();
    if (absl::Status s = CheckCount("chunks", chunks_, limits_.max_chunks); !s.ok()) return s;
    if (shard_bytes > 0 && shard.chunks().empty()) {
      return Lost(absl::StrCat(where(), " holds ", shard_bytes, " bytes but lists no chunks"));
    }
    uint64_t next = 0;
    for (int i = 0; i < shard.chunks_size(); ++i) {
      const v1::StoredChunk& chunk = shard.chunks(i);
      const auto at = [&] { return absl::StrCat(where(), " chunk ", i); };
      if (chunk.length() == 0) return Lost(absl::StrCat(at(), " is empty"));
      if (chunk.length() > limits_.max_chunk_bytes) {
        return Lost(absl::StrCat(at(), " is ", chunk.length(), " bytes, more than the limit of ",
                                 limits_.max_chunk_bytes));
      }
      if (chunk.shard_offset() != next) {
        return Lost(absl::StrCat(at(), " starts at shard offset ", chunk.shard_offset(), " where ",
                                 next,
                                 " was expected (chunks must be contiguous, in order, "
                                 "without gaps or overlaps)"));
      }
      if (chunk.length() > shard_bytes - next) {
        return Lost(absl::StrCat(at(), " [", next, ", +", chunk.length(),
                                 ") runs past the shard's ", shard_bytes, " bytes"));
      }
      next += chunk.length();
      if (absl::Status s = CheckPlacement(chunk, at); !s.ok()) return s;
    }
    if (next != shard_bytes) {
      return Lost(
          absl::StrCat(where(), ": its chunks cover ", next, " of its ", shard_bytes, " bytes"));
    }
    return absl::OkStatus();
  }

  // The chunk's file is inside the step directory and its byte range is
  // representable as an off_t, padding included. Records the range for
  // CheckDisjoint.
  template <typename At>
  absl::Status CheckPlacement(const v1::StoredChunk& chunk, const At& at) {
    // A shard's chunks are mostly in one file: its name is checked once.
    if (!last_confined_ || chunk.file() != *last_confined_) {
      if (absl::Status s = ValidateConfinedName(chunk.file()); !s.ok()) {
        return Lost(absl::StrCat(at(), ": ", s.message()));
      }
      last_confined_ = chunk.file();
    }
    constexpr uint64_t kMaxEnd = uint64_t{1} << 62;  // room to round up to any alignment
    if (chunk.file_offset() > kMaxEnd || chunk.length() > kMaxEnd - chunk.file_offset()) {
      return Lost(absl::StrCat(at(), ": file offset ", chunk.file_offset(), " + length ",
                               chunk.length(), " is beyond any file"));
    }
    if (absl::Status s = CheckChunkEncoding(chunk, at()); !s.ok()) {
      return Lost(s.message());
    }
    if (chunk.has_delta_base() &&
        (!delta_base_step_.has_value() || chunk.delta_base_step() != *delta_base_step_)) {
      return Lost(absl::StrCat(at(), ": a delta against step ", chunk.delta_base_step(),
                               ", not the manifest's delta base"));
    }
    if (chunk.length() > 0) {
      Extent extent = owner_;
      extent.file = chunk.file();
      extent.offset = chunk.file_offset();
      extent.length = chunk.length();
      extents_.push_back(extent);
    }
    return absl::OkStatus();
  }

  // No two chunks share a byte of a file: the save planner gives every item
  // a place of its own. Readers rely on it: the load planner and the load's
  // pool groups read each (file, offset) once and hand its bytes, checked
  // against one chunk's CRC, to every owner of a chunk there, so two chunks
  // at one place would give one owner another's bytes, or a length that is
  // not its own. Found by tests/fuzz/fuzz_manifest.
  absl::Status CheckDisjoint(const v1::CheckpointManifest& m) {
    // Sorted on integers: the files (a few per host) numbered once, so the
    // sort of a million chunks never compares their names.
    absl::flat_hash_map<absl::string_view, uint32_t> file_number;
    for (const Extent& e : extents_) file_number.try_emplace(e.file, 0);
    std::vector<absl::string_view> files;
    files.reserve(file_number.size());
    for (const auto& [file, number] : file_number) files.push_back(file);
    std::sort(files.begin(), files.end());
    for (uint32_t f = 0; f < files.size(); ++f) file_number[files[f]] = f;
    for (Extent& e : extents_) e.file_number = file_number[e.file];
    // Grouped by file, then each file's sorted by offset on plain pairs: one
    // sort of a million whole extents moved 50 MB about, most of a
    // cluster-scale plan's check.
    std::vector<uint32_t> first(files.size() + 1, 0);
    for (const Extent& e : extents_) ++first[e.file_number + 1];
    std::partial_sum(first.begin(), first.end(), first.begin());
    std::vector<std::pair<uint64_t, uint32_t>> by_file(extents_.size());  // (offset, extent)
    {
      std::vector<uint32_t> next(first.begin(), first.end() - 1);
      for (uint32_t i = 0; i < extents_.size(); ++i) {
        by_file[next[extents_[i].file_number]++] = {extents_[i].offset, i};
      }
    }
    for (size_t f = 0; f < files.size(); ++f) {
      const auto begin = by_file.begin() + first[f];
      const auto end = by_file.begin() + first[f + 1];
      std::sort(begin, end);
      // Sorted by start, ranges are disjoint when each ends before the next.
      for (auto it = begin + (begin == end ? 0 : 1); it < end; ++it) {
        const Extent& a = extents_[(it - 1)->second];
        const Extent& b = extents_[it->second];
        if (b.offset - a.offset < a.length) {
          return Lost(absl::StrCat(OwnerName(m, a), " and ", OwnerName(m, b), " overlap in ",
                                   Quoted(a.file), " at offset ", b.offset,
                                   " (chunks may not share bytes)"));
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckObject(const v1::ObjectEntry& object) {
    const std::string at =
        absl::StrCat("object ", Quoted(object.key()), " of rank ", object.rank());
    if (absl::Status s = ValidateName("object", object.key()); !s.ok()) {
      return Lost(absl::StrCat(at, ": ", s.message()));
    }
    if (object.rank() < -1) return Lost(absl::StrCat(at, ": rank below -1 (global)"));
    const v1::StoredChunk& chunk = object.chunk();
    chunks_ += 1;
    if (absl::Status s = CheckCount("chunks", chunks_, limits_.max_chunks); !s.ok()) return s;
    if (chunk.length() > limits_.max_object_bytes) {
      return Lost(absl::StrCat(at, " is ", chunk.length(), " bytes, more than the limit of ",
                               limits_.max_object_bytes));
    }
    if (chunk.shard_offset() != 0) {
      return Lost(absl::StrCat(at, ": its chunk starts at offset ", chunk.shard_offset(),
                               " of the object, not 0"));
    }
    // An empty object is read from nowhere: its file name is never opened.
    if (chunk.length() == 0 && chunk.file().empty()) return absl::OkStatus();
    return CheckPlacement(chunk, [&] { return at; });
  }

  // A chunk's byte range in its file and whose it is.
  struct Extent {
    int tensor = -1;  // index into the manifest's tensors, or
    int object = -1;  // into its objects
    absl::string_view file = {};
    uint32_t file_number = 0;  // files' order by name, set by CheckDisjoint
    uint64_t offset = 0;
    uint64_t length = 0;
  };

  static std::string OwnerName(const v1::CheckpointManifest& m, const Extent& e) {
    if (e.tensor >= 0) return absl::StrCat("tensor ", Quoted(m.tensors(e.tensor).fqn()));
    const v1::ObjectEntry& object = m.objects(e.object);
    return absl::StrCat("object ", Quoted(object.key()), " of rank ", object.rank());
  }

  const std::string source_;
  const ManifestLimits& limits_;
  int64_t shards_ = 0;
  int64_t chunks_ = 0;
  Extent owner_;                                    // of the chunks being checked
  std::vector<Extent> extents_;                     // every non-empty chunk's
  std::optional<absl::string_view> last_confined_;  // the last file name that passed
  std::optional<int64_t> delta_base_step_;          // the manifest's, when set
  // A save plan's manifest (ValidatePlannedManifest): its tensor shards
  // list no chunks; they will list planned_chunks_.
  bool planned_ = false;
  int64_t planned_chunks_ = 0;
};

}  // namespace

absl::Status ValidateManifest(const v1::CheckpointManifest& manifest, absl::string_view job,
                              int64_t step, absl::string_view source, const ManifestLimits& limits,
                              int threads) {
  return Checker(source, limits).Run(manifest, job, step, std::max(1, threads));
}

absl::Status ValidateCompactRoot(const v1::CheckpointManifest& root, absl::string_view job,
                                 int64_t step, absl::string_view source,
                                 const ManifestLimits& limits,
                                 std::vector<ChunkExtent>& object_extents) {
  return Checker(source, limits).RunRoot(root, job, step, object_extents);
}

absl::Status ValidatePlannedManifest(const v1::SaveAssignment& plan, int64_t shard_chunks,
                                     uint64_t longest_chunk, absl::string_view source,
                                     const ManifestLimits& limits, int threads) {
  const v1::CheckpointManifest& manifest = plan.manifest_template();
  const auto lost = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(source, ": ", what));
  };
  // What ValidateManifest checks of each chunk, once for all of them.
  if (longest_chunk > limits.max_chunk_bytes) {
    return lost(absl::StrCat("a chunk is ", longest_chunk, " bytes, more than the limit of ",
                             limits.max_chunk_bytes));
  }
  for (const v1::HostAssignment& host : plan.hosts()) {
    for (const std::string& file : host.files()) {
      if (absl::Status s = ValidateConfinedName(file); !s.ok()) {
        return lost(absl::StrCat("file ", Quoted(file), ": ", s.message()));
      }
    }
  }
  Checker checker(source, limits);
  checker.ExpectPlannedChunks(shard_chunks);
  return checker.Run(manifest, manifest.job(), manifest.step(), std::max(1, threads));
}

absl::Status CheckChunkEncoding(const v1::StoredChunk& chunk, absl::string_view where) {
  // grouped-zstd's planes (daemon/codec/chunk_codec.h checks the same bound).
  constexpr uint32_t kMaxElementBytes = 16;
  if (!v1::ChunkCodec_IsValid(chunk.codec())) {
    return absl::DataLossError(
        absl::StrCat(where, ": unknown codec ", static_cast<int>(chunk.codec())));
  }
  if (IsEncoded(chunk)) {
    if (chunk.stored_length() == 0 || chunk.stored_length() > chunk.length()) {
      return absl::DataLossError(absl::StrCat(where, ": stores ", chunk.stored_length(),
                                              " encoded bytes for ", chunk.length(),
                                              " raw bytes (1 to the raw length)"));
    }
    // Every decoder checks it (daemon/codec), so every codec's is checked.
    if (chunk.element_bytes() < 1 || chunk.element_bytes() > kMaxElementBytes) {
      return absl::DataLossError(absl::StrCat(where, ": element size ", chunk.element_bytes(),
                                              " is outside [1, ", kMaxElementBytes, "]"));
    }
  }
  if (!chunk.has_delta_base()) return absl::OkStatus();
  // A delta (the writers store every one encoded): against a whole chunk
  // of the same length, itself well formed.
  if (!IsEncoded(chunk)) {
    return absl::DataLossError(absl::StrCat(where, ": a delta stored raw"));
  }
  const v1::StoredChunk& base = chunk.delta_base();
  const std::string of_base =
      absl::StrCat(where, ": its delta base (step ", chunk.delta_base_step(), ")");
  if (base.has_delta_base()) {
    return absl::DataLossError(absl::StrCat(of_base, " is itself a delta"));
  }
  if (base.length() != chunk.length()) {
    return absl::DataLossError(
        absl::StrCat(of_base, " is ", base.length(), " bytes, not ", chunk.length()));
  }
  if (absl::Status s = ValidateConfinedName(base.file()); !s.ok()) {
    return absl::DataLossError(absl::StrCat(of_base, ": ", s.message()));
  }
  constexpr uint64_t kMaxEnd = uint64_t{1} << 62;
  if (base.file_offset() > kMaxEnd || base.length() > kMaxEnd - base.file_offset()) {
    return absl::DataLossError(absl::StrCat(of_base, " lies beyond any file"));
  }
  return CheckChunkEncoding(base, of_base);
}

}  // namespace ckpt::planning
