#include "daemon/planning/load_planner.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/planning/column_manifest.h"
#include "daemon/planning/global_load.h"
#include "daemon/planning/parallel_for.h"
#include "daemon/planning/rank_form.h"
#include "daemon/planning/region_table.h"
#include "proto/lib/compact_plan.h"
#include "proto/lib/dtype.h"
#include "proto/lib/geometry.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/request_limits.h"
#include "proto/lib/status_context.h"
#include "proto/lib/stored_chunk.h"

namespace ckpt::planning {
namespace {

template <typename Shape>
std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// How many requests ahead region lookups are prefetched: about as many as
// the memory has in flight while one request is planned.
constexpr int kPrefetchAhead = 8;

// One copy into a request, before it becomes a CopyRun: a cluster-scale
// load emits millions, so they are gathered as plain structs, grouped by
// chunk, and kept so (global_load.h). Runs are worked out once per
// distinct region (Planned) and replayed for every request of it (Request)
// only when messages are made: copies per request were 8 million structs,
// half a gigabyte, at 4096 ranks x 1000 tensors.
using Run = GlobalLoad::Run;

// The chunks to read, each once however many requests need it. A stored
// shard's chunks get read ids when a request first meets the shard (one
// slot per chunk, filled when a run first copies from it), so finding a
// chunk's read is an array lookup; its file is numbered once, when its read
// is made, so ordering the reads compares integers.
struct Reads {
  static constexpr uint32_t kNone = ~uint32_t{0};
  // A copy of the stored chunk's fields, taken while it is in the cache:
  // the reads are made in file order, far from the manifest's.
  using Chunk = GlobalLoad::Chunk;
  std::vector<Chunk> chunks;
  std::vector<uint32_t> read_of_slot;  // kNone: not read (yet)
  // The files the reads name, numbered as first read; by the manifest's
  // number of a file, its number here (kNone: not read).
  std::vector<absl::string_view> files;
  std::vector<uint32_t> manifest_file;  // by file here, the manifest's number
  std::vector<uint32_t> file_of;        // by the manifest's number

  explicit Reads(size_t manifest_files = 0) : file_of(manifest_files, kNone) {}

  // Slots for a stored shard's chunks; returns the first.
  uint32_t AddSlots(int chunks) {
    const uint32_t first = static_cast<uint32_t>(read_of_slot.size());
    read_of_slot.resize(read_of_slot.size() + chunks, kNone);
    return first;
  }

  // `index`: the chunk's among all of `manifest`'s.
  uint32_t ReadOf(uint32_t slot, const ColumnManifest& manifest, uint32_t index,
                  const std::string& fqn) {
    uint32_t& read = read_of_slot[slot];
    if (read == kNone) {
      read = static_cast<uint32_t>(chunks.size());
      const ColumnManifest::Chunk& chunk = manifest.all_chunks()[index];
      uint32_t& file = file_of[chunk.file];
      if (file == kNone) {
        file = static_cast<uint32_t>(files.size());
        files.push_back(manifest.files()[chunk.file]);
        manifest_file.push_back(chunk.file);
      }
      chunks.push_back({file, chunk.crc32c, chunk.file_offset, chunk.shard_offset, chunk.length,
                        &fqn, manifest.encoded(index)});
    }
    return read;
  }
};

// The stored shard's chunks must tile its packed bytes exactly: sorted by
// shard_offset, contiguous from 0, no gap, no overlap, no wrap. Runs are
// mapped onto chunks by offset, so anything else would copy bytes from
// outside the chunk read (a damaged or hostile manifest).
// `what` names the shard, made only for an error.
absl::Status CheckChunksTile(absl::Span<const ColumnManifest::Chunk> chunks,
                             const ColumnManifest& manifest, uint64_t bytes,
                             absl::FunctionRef<std::string()> what) {
  uint64_t at = 0;
  for (const ColumnManifest::Chunk& chunk : chunks) {
    if (chunk.shard_offset != at || chunk.length == 0 || chunk.length > bytes - at) {
      return absl::DataLossError(absl::StrCat(
          what(), ": chunk at shard offset ", chunk.shard_offset, " of ", chunk.length,
          " bytes (in ", manifest.files()[chunk.file], ") does not continue the shard's chunks at ",
          at, " of its ", bytes, " bytes"));
    }
    at += chunk.length;
  }
  if (at != bytes) {
    return absl::DataLossError(
        absl::StrCat(what(), ": chunks hold ", at, " of the shard's ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

// A stored shard's chunks, as the runs are mapped onto them.
struct ShardChunks {
  const ColumnManifest& manifest;
  absl::Span<const ColumnManifest::Chunk> chunks;
  uint32_t first_index = 0;  // chunks[0]'s among all of the manifest's
  uint32_t first_slot = 0;   // chunks[0]'s in Reads
  const std::string& fqn;
};

// Adds one copy (count reps) from chunk k of `shard`, for the requests it
// is replayed for.
void Emit(const ShardChunks& shard, size_t k, uint64_t in_chunk, uint64_t dst, uint64_t length,
          uint64_t count, uint64_t chunk_stride, uint64_t dest_stride, Reads& reads,
          std::vector<Run>& out) {
  Run& run = out.emplace_back();
  run.read = reads.ReadOf(shard.first_slot + static_cast<uint32_t>(k), shard.manifest,
                          shard.first_index + static_cast<uint32_t>(k), shard.fqn);
  run.chunk_offset = in_chunk;
  run.dest_offset = dst;
  run.length = length;
  if (count > 1) {
    run.count = count;
    run.chunk_stride = chunk_stride;
    run.dest_stride = dest_stride;
  }
}

// Maps the strided run onto the stored shard's chunks (which tile it, see
// CheckChunksTile): the repetitions that fall inside one chunk become one
// strided CopyRun; a repetition that straddles chunk boundaries is cut into
// single runs. Cost: the chunks the run crosses plus its straddling
// repetitions, at most one per chunk boundary.
void AddRunToChunks(const ShardChunks& shard, const geo::StridedRun& run, Reads& reads,
                    std::vector<Run>& out) {
  const absl::Span<const ColumnManifest::Chunk> chunks = shard.chunks;
  auto chunk_at = [&](uint64_t offset) -> size_t {
    if (chunks.size() == 1) return 0;
    auto it = std::upper_bound(
        chunks.begin(), chunks.end(), offset,
        [](uint64_t o, const ColumnManifest::Chunk& c) { return o < c.shard_offset; });
    return static_cast<size_t>(it - chunks.begin()) - 1;  // the first chunk starts at 0 <= offset
  };
  const uint64_t n = static_cast<uint64_t>(run.count);
  const uint64_t length = static_cast<uint64_t>(run.length);
  const uint64_t ss = static_cast<uint64_t>(run.src_stride);
  const uint64_t ds = static_cast<uint64_t>(run.dst_stride);
  uint64_t k = 0;
  while (k < n) {
    const uint64_t start = static_cast<uint64_t>(run.src_offset) + k * ss;
    const uint64_t dst = static_cast<uint64_t>(run.dst_offset) + k * ds;
    size_t c = chunk_at(start);
    const uint64_t chunk_end = chunks[c].shard_offset + chunks[c].length;
    if (start + length <= chunk_end) {
      const uint64_t last =
          n == 1 ? k : std::min<uint64_t>(n - 1, k + (chunk_end - start - length) / ss);
      Emit(shard, c, start - chunks[c].shard_offset, dst, length, last - k + 1, ss, ds, reads, out);
      k = last + 1;
      continue;
    }
    uint64_t src = start;
    uint64_t to = dst;
    uint64_t left = length;
    for (; left > 0; ++c) {
      const uint64_t in_chunk = src - chunks[c].shard_offset;
      const uint64_t piece = std::min<uint64_t>(left, chunks[c].length - in_chunk);
      Emit(shard, c, in_chunk, to, piece, 1, 0, 0, reads, out);
      src += piece;
      to += piece;
      left -= piece;
    }
    ++k;
  }
}

// A tensor's stored shards, for finding those a request meets without
// trying every one: each shard's region (converted once) and flattened span,
// sorted by where the span begins. A request's candidates are the shards
// whose span begins before the request's ends and after the request's
// begins minus the longest stored span: O(log shards + candidates) for row
// and flat splits, every shard for column splits (whose spans all meet).
struct StoredIndex {
  struct Entry {
    int64_t begin = 0;
    int64_t end = 0;
    int shard = 0;  // index into the layout's shards
    geo::Region region;
  };
  std::vector<Entry> by_begin;
  int64_t longest = 0;
  std::vector<int64_t> shard_bytes;  // by index into the layout's shards
};

absl::StatusOr<StoredIndex> IndexStoredShards(
    const google::protobuf::RepeatedPtrField<v1::Region>& regions, const std::string& fqn,
    const geo::Shape& shape, int64_t element_size, const std::string& where) {
  StoredIndex index;
  index.by_begin.reserve(regions.size());
  index.shard_bytes.resize(regions.size(), 0);
  for (int k = 0; k < regions.size(); ++k) {
    StoredIndex::Entry e;
    e.shard = k;
    e.region = RegionFromProto(regions[k]);
    absl::StatusOr<std::pair<int64_t, int64_t>> span = geo::RegionSpan(shape, e.region);
    if (!span.ok()) {
      return WithContext(span.status(),
                         absl::StrCat(where, " tensor ", fqn, " shard ", k, ", its stored region"));
    }
    if (span->first >= span->second) continue;  // empty: meets nothing
    // The region is valid (it has a span), so its count is.
    index.shard_bytes[k] = *geo::RegionNumElements(shape, e.region) * element_size;
    e.begin = span->first;
    e.end = span->second;
    index.longest = std::max(index.longest, e.end - e.begin);
    index.by_begin.push_back(std::move(e));
  }
  std::stable_sort(
      index.by_begin.begin(), index.by_begin.end(),
      [](const StoredIndex::Entry& a, const StoredIndex::Entry& b) { return a.begin < b.begin; });
  return index;
}

// Tensors stored alike: the same dtype, shape and stored regions in the
// same order (the layers of a model, saved by the same ranks). Where a
// request meets the stored shards depends on nothing else, so it is worked
// out once per layout (Geometry) and mapped onto each tensor's own chunks.
// The manifest lists each list of regions once (ColumnManifest::layouts):
// tensors alike have the same dtype, shape and layout number.
bool SameLayout(const ColumnManifest::Tensor& a, const ColumnManifest::Tensor& b) {
  return a.dtype == b.dtype && a.layout == b.layout && a.shape == b.shape;
}

size_t LayoutHash(const ColumnManifest::Tensor& tensor) {
  return absl::HashOf(tensor.dtype, tensor.layout, absl::MakeConstSpan(tensor.shape));
}

struct Layout {
  const ColumnManifest::Tensor* first = nullptr;  // the tensor it was found in
  StoredIndex index;
};

// What a request's region of a layout meets: each stored shard's part.
struct Geometry {
  int64_t bytes = 0;
  struct Piece {
    int shard = 0;  // index into the layout's shards
    geo::StridedRun run;
  };
  std::vector<Piece> pieces;
};

// What every rank asking for one spelling of a region gets: worked out for
// the first such request, replayed for the others.
// Its runs lie in the planner's one list of runs (a vector each was a
// heap block or two per distinct region: a million at cluster scale),
// made once every request was seen (Planner::MapOntoChunks).
struct Planned {
  int64_t bytes = 0;
  int tensor = 0;
  uint32_t geometry = 0;   // what the region meets: Planner's geometries
  uint32_t first_run = 0;  // into Planner::runs()
  uint32_t runs = 0;
};

// One rank's request, served by a Planned.
struct Request {
  int rank = 0;
  uint32_t index = 0;    // into the rank's tensors
  uint32_t planned = 0;  // Planner's id of what it gets
};

// The tensors of the manifest and what has been worked out about them.
class Planner {
 public:
  Planner(const ColumnManifest& manifest, const RequestLimits& limits)
      : manifest_(manifest),
        limits_(limits),
        where_(absl::StrCat("checkpoint ", manifest.header().job(), " step ",
                            manifest.header().step())),
        reads_(manifest.files().size()) {
    const std::vector<ColumnManifest::Tensor>& tensors = manifest.tensors();
    for (size_t t = 0; t < tensors.size(); ++t) {
      tensor_by_fqn_.try_emplace(tensors[t].fqn, static_cast<int>(t));
    }
    layout_of_tensor_.resize(tensors.size(), -1);
  }

  const std::string& where() const { return where_; }

  // The tensor a host's table names (its index in the manifest) once its
  // dtype and shape were found to be the stored ones, or why not; `region`
  // is what the rank first asks of it.
  absl::StatusOr<int> TensorOf(const v1::TensorDesc& desc, const v1::Region& region, int rank) {
    const auto invalid_first = [&](absl::Status otherwise) {
      // A malformed request is named as such before it is looked up.
      if (absl::Status s = ValidateShardRequest(Scratch(desc, region), limits_).status(); !s.ok()) {
        return WithContext(s, absl::StrCat("rank ", rank));
      }
      return otherwise;
    };
    auto found = tensor_by_fqn_.find(desc.fqn());
    if (found == tensor_by_fqn_.end()) {
      return invalid_first(
          absl::NotFoundError(absl::StrCat("tensor ", desc.fqn(), " is not in ", where_)));
    }
    const int t = found->second;
    const ColumnManifest::Tensor& entry = manifest_.tensors()[t];
    if (entry.dtype != desc.dtype() ||
        !std::equal(entry.shape.begin(), entry.shape.end(), desc.global_shape().begin(),
                    desc.global_shape().end())) {
      return invalid_first(absl::InvalidArgumentError(absl::StrCat(
          "tensor ", desc.fqn(), ": rank ", rank, " asks for dtype ", DTypeName(desc.dtype()),
          " shape ", ShapeString(desc.global_shape()), " but ", where_, " holds dtype ",
          DTypeName(entry.dtype), " shape ", ShapeString(entry.shape))));
    }
    return t;
  }

  // The id of the copies of `region` of tensor t (from TensorOf; the box
  // checked against --max_dims): planned(id), or why it cannot be served.
  absl::StatusOr<uint32_t> Plan(const v1::Region& region, int t, int rank) {
    const auto [id, fresh] = regions_.Intern(t, region);
    if (!fresh) return id;
    // A failure ends the planning: the table's new id gets no entry.
    absl::StatusOr<Planned> planned = PlanFirst(region, manifest_.tensors()[t], t, rank);
    if (!planned.ok()) return planned.status();
    planned_.push_back(std::move(*planned));
    return id;
  }

  // Starts loading what Plan(region, t, ...) will look up, for a request
  // a few ahead of the one being planned: at a million regions each lookup
  // otherwise waits for memory.
  void Prefetch(const v1::Region& region, int t) const {
    regions_.Prefetch(t, region, limits_.max_dims);
  }

  const Planned& planned(uint32_t id) const { return planned_[id]; }
  absl::Span<const Run> runs(const Planned& planned) const {
    return absl::MakeConstSpan(runs_).subspan(planned.first_run, planned.runs);
  }
  uint32_t planned_count() const { return static_cast<uint32_t>(planned_.size()); }
  // What the plan keeps (GlobalLoadAccess::Fill), taken once every read
  // was made.
  Reads TakeReads() { return std::move(reads_); }
  std::vector<Run> TakeRuns() { return std::move(runs_); }

  // Maps every planned region onto its tensor's chunks: its runs, and the
  // chunks they read. Tensors are independent here, so they are cut among
  // `threads` threads (parallel_for.h), each with reads and runs of its
  // own, joined in tensor order; the plan is the same on any number. Of
  // several failures, the first planned region's is named, as one thread
  // would have.
  absl::Status MapOntoChunks(int threads);

 private:
  // The first request for this spelling of a region of this tensor:
  // where it meets the stored shards, worked out once per layout (its
  // mapping onto this tensor's chunks comes once every request was seen).
  absl::StatusOr<Planned> PlanFirst(const v1::Region& region, const ColumnManifest::Tensor& entry,
                                    int t, int rank) {
    if (layout_of_tensor_[t] < 0) {
      // A tensor's first request is validated in full, whatever its layout.
      absl::StatusOr<ShardGeometry> g =
          ValidateShardRequestGeometry(Scratch(entry, region), limits_);
      if (!g.ok()) return WithContext(g.status(), absl::StrCat("rank ", rank));
      absl::StatusOr<int> layout = LayoutOf(entry, *g);
      if (!layout.ok()) return layout.status();
      layout_of_tensor_[t] = *layout;
    }
    const Layout& layout = layouts_[layout_of_tensor_[t]];
    const auto [id, fresh] = geometry_regions_.Intern(layout_of_tensor_[t], region);
    if (fresh) {
      // A failure ends the planning: the table's new id gets no entry.
      absl::StatusOr<Geometry> g = Meet(Scratch(entry, region), layout, rank);
      if (!g.ok()) return g.status();
      geometries_.push_back(std::move(*g));
    }
    Planned out;
    out.bytes = geometries_[id].bytes;
    out.tensor = t;
    out.geometry = id;
    return out;
  }

  // The layout of a tensor whose first request had geometry `g`: an
  // earlier tensor's, or a new one indexed here.
  absl::StatusOr<int> LayoutOf(const ColumnManifest::Tensor& entry, const ShardGeometry& g) {
    std::vector<int>& alike = layouts_by_hash_[LayoutHash(entry)];
    for (int l : alike) {
      if (SameLayout(*layouts_[l].first, entry)) return l;
    }
    static const v1::ShardLayout kNone;
    const v1::ShardLayout& stored =
        entry.layout == ColumnManifest::kNoLayout ? kNone : manifest_.layouts()[entry.layout];
    absl::StatusOr<StoredIndex> index =
        IndexStoredShards(stored.regions(), entry.fqn, g.shape, g.element_size, where_);
    if (!index.ok()) return index.status();
    alike.push_back(static_cast<int>(layouts_.size()));
    layouts_.push_back(Layout{&entry, std::move(*index)});
    return alike.back();
  }

  // Where the request's region meets the layout's stored shards: validated,
  // intersected with those whose spans meet it, covered in full.
  absl::StatusOr<Geometry> Meet(const v1::TensorShard& request, const Layout& layout, int rank) {
    absl::StatusOr<ShardGeometry> g = ValidateShardRequestGeometry(request, limits_);
    if (!g.ok()) return WithContext(g.status(), absl::StrCat("rank ", rank));
    const StoredIndex& index = layout.index;
    absl::StatusOr<std::pair<int64_t, int64_t>> want = geo::RegionSpan(g->shape, g->region);
    if (!want.ok()) return want.status();
    Geometry out;
    out.bytes = g->bytes;
    int64_t covered = 0;
    auto first =
        std::lower_bound(index.by_begin.begin(), index.by_begin.end(), want->first - index.longest,
                         [](const StoredIndex::Entry& e, int64_t at) { return e.begin < at; });
    for (auto it = first; it != index.by_begin.end() && it->begin < want->second; ++it) {
      if (it->end <= want->first) continue;
      absl::StatusOr<std::vector<geo::StridedRun>> runs = geo::IntersectRegionsStrided(
          g->shape, g->element_size, it->region, g->region, limits_.max_runs_per_shard);
      if (!runs.ok()) {
        return WithContext(runs.status(), absl::StrCat(where_, " tensor ", layout.first->fqn,
                                                       " shard ", it->shard));
      }
      for (const geo::StridedRun& run : *runs) {
        out.pieces.push_back({it->shard, run});
        covered += run.length * run.count;
      }
    }
    if (covered != g->bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor ", request.fqn(), " region ", g->region.DebugString(), ": ", where_,
          " holds only ", covered, " of the ", g->bytes, " bytes asked for (partial save)"));
    }
    return out;
  }

  // A request of the tensor `desc` describes, for `region`: what the
  // validation of a request reads (the compact form has no request
  // messages). Valid until the next call.
  template <typename Desc>
  const v1::TensorShard& Scratch(const Desc& desc, const v1::Region& region = v1::Region()) {
    scratch_.Clear();
    scratch_.set_fqn(desc.fqn());
    scratch_.set_dtype(desc.dtype());
    *scratch_.mutable_global_shape() = desc.global_shape();
    *scratch_.mutable_region() = region;
    return scratch_;
  }
  const v1::TensorShard& Scratch(const ColumnManifest::Tensor& tensor, const v1::Region& region) {
    scratch_.Clear();
    scratch_.set_fqn(tensor.fqn);
    scratch_.set_dtype(tensor.dtype);
    scratch_.mutable_global_shape()->Add(tensor.shape.begin(), tensor.shape.end());
    *scratch_.mutable_region() = region;
    return scratch_;
  }

  const ColumnManifest& manifest_;
  const RequestLimits& limits_;
  const std::string where_;
  absl::flat_hash_map<absl::string_view, int> tensor_by_fqn_;
  v1::TensorShard scratch_;
  std::vector<int> layout_of_tensor_;  // -1 until the tensor's first request
  std::vector<Layout> layouts_;
  absl::flat_hash_map<size_t, std::vector<int>> layouts_by_hash_;
  RegionTable geometry_regions_;  // (layout, region): ids into geometries_
  std::vector<Geometry> geometries_;
  RegionTable regions_;
  std::vector<Planned> planned_;  // by region id
  std::vector<Run> runs_;         // every Planned's, one after the other
  Reads reads_;
};

absl::Status Planner::MapOntoChunks(int threads) {
  // The planned regions by tensor, in id order.
  const size_t tensors = manifest_.tensors().size();
  std::vector<uint32_t> first(tensors + 1, 0);
  for (const Planned& p : planned_) ++first[p.tensor + 1];
  std::partial_sum(first.begin(), first.end(), first.begin());
  std::vector<uint32_t> by_tensor(planned_.size());
  {
    std::vector<uint32_t> next(first.begin(), first.end() - 1);
    for (uint32_t id = 0; id < planned_.size(); ++id) by_tensor[next[planned_[id].tensor]++] = id;
  }
  // One part per range of tensors (the k-th range's is parts[k]): its
  // tensors' reads and runs, numbered from 0.
  struct Part {
    explicit Part(size_t files) : reads(files) {}
    size_t begin = 0;  // its first tensor
    Reads reads;
    std::vector<Run> runs;
    std::optional<std::pair<uint32_t, absl::Status>> failed;  // (planned id, why)
  };
  std::vector<Part> parts(std::max(1, threads), Part(manifest_.files().size()));
  // Runs and reads: about one per piece of a region where a stored shard
  // is one chunk (more where a piece crosses chunks). Reserved up front,
  // the first part's for all parts, which are joined into it: a list
  // grown by doubling was copied and its pages zeroed again at each step
  // (reserved memory costs nothing until it is written).
  uint64_t pieces = 0;
  for (const Planned& p : planned_) pieces += geometries_[p.geometry].pieces.size();
  const size_t used = ParallelFor(
      tensors, threads, planned_.size(), kMinWorkPerRange,
      [&](size_t range, size_t begin, size_t end) {
        Part& part = parts[range];
        part.begin = begin;
        uint64_t mine = pieces;
        if (range > 0) {
          mine = 0;
          for (uint32_t k = first[begin]; k < first[end]; ++k) {
            mine += geometries_[planned_[by_tensor[k]].geometry].pieces.size();
          }
        }
        part.runs.reserve(mine);
        part.reads.chunks.reserve(mine);
        std::vector<uint32_t> first_slot;  // by the tensor's stored shard; kNone: none yet
        for (size_t t = begin; t < end; ++t) {
          if (first[t] == first[t + 1]) continue;
          const ColumnManifest::Tensor& entry = manifest_.tensors()[t];
          const Layout& layout = layouts_[layout_of_tensor_[t]];
          first_slot.assign(manifest_.shards_of(entry), Reads::kNone);
          for (uint32_t k = first[t]; k < first[t + 1]; ++k) {
            const uint32_t id = by_tensor[k];
            Planned& planned = planned_[id];
            const size_t first_run = part.runs.size();
            for (const Geometry::Piece& piece : geometries_[planned.geometry].pieces) {
              const uint32_t shard = entry.first_shard + static_cast<uint32_t>(piece.shard);
              const absl::Span<const ColumnManifest::Chunk> chunks = manifest_.chunks_of(shard);
              uint32_t& slot = first_slot[piece.shard];
              if (slot == Reads::kNone) {
                const auto what = [&] {
                  return absl::StrCat(where_, " tensor ", entry.fqn, " shard ", piece.shard);
                };
                if (absl::Status s = CheckChunksTile(
                        chunks, manifest_,
                        static_cast<uint64_t>(layout.index.shard_bytes[piece.shard]), what);
                    !s.ok()) {
                  // The planned region that fails first is looked for on.
                  if (!part.failed || id < part.failed->first) part.failed.emplace(id, s);
                  break;
                }
                slot = part.reads.AddSlots(static_cast<int>(chunks.size()));
              }
              AddRunToChunks(
                  ShardChunks{manifest_, chunks, manifest_.first_chunk(shard), slot, entry.fqn},
                  piece.run, part.reads, part.runs);
            }
            // Relative to the part's runs until the parts are joined.
            planned.first_run = static_cast<uint32_t>(std::min<size_t>(first_run, UINT32_MAX));
            planned.runs =
                static_cast<uint32_t>(std::min<size_t>(part.runs.size() - first_run, UINT32_MAX));
          }
        }
      });
  const Part* failed = nullptr;
  uint64_t total_runs = 0;
  uint64_t total_reads = 0;
  for (size_t p = 0; p < used; ++p) {
    if (parts[p].failed && (failed == nullptr || parts[p].failed->first < failed->failed->first)) {
      failed = &parts[p];
    }
    total_runs += parts[p].runs.size();
    total_reads += parts[p].reads.chunks.size();
  }
  if (failed != nullptr) return failed->failed->second;
  if (total_runs > UINT32_MAX || total_reads >= Reads::kNone) {
    return absl::ResourceExhaustedError(absl::StrCat(where_, ": the load copies ", total_runs,
                                                     " runs from ", total_reads,
                                                     " chunks, more than 2^32"));
  }
  // Joined in tensor order: each part's reads and runs after the earlier
  // parts', its files numbered among all. The first part's lists become
  // the plan's (numbered from 0, its files first: nothing to renumber),
  // the others appended to them.
  runs_ = std::move(parts[0].runs);
  reads_ = std::move(parts[0].reads);
  reads_.read_of_slot = std::vector<uint32_t>();
  runs_.reserve(total_runs);
  reads_.chunks.reserve(total_reads);
  for (size_t p = 1; p < used; ++p) {
    Part& part = parts[p];
    const uint32_t run_base = static_cast<uint32_t>(runs_.size());
    const uint32_t read_base = static_cast<uint32_t>(reads_.chunks.size());
    std::vector<uint32_t> file_of(part.reads.files.size());
    for (size_t f = 0; f < part.reads.files.size(); ++f) {
      const uint32_t in_manifest = part.reads.manifest_file[f];
      uint32_t& joined = reads_.file_of[in_manifest];
      if (joined == Reads::kNone) {
        joined = static_cast<uint32_t>(reads_.files.size());
        reads_.files.push_back(part.reads.files[f]);
        reads_.manifest_file.push_back(in_manifest);
      }
      file_of[f] = joined;
    }
    for (Reads::Chunk chunk : part.reads.chunks) {
      chunk.file = file_of[chunk.file];
      reads_.chunks.push_back(chunk);
    }
    for (Run run : part.runs) {
      run.read += read_base;
      runs_.push_back(run);
    }
    const size_t end = p + 1 < used ? parts[p + 1].begin : tensors;
    for (uint32_t k = first[part.begin]; k < first[end]; ++k) {
      planned_[by_tensor[k]].first_run += run_base;
    }
    // Given back as it is joined: the parts and the joined lists are each
    // as large as the plan's runs and reads.
    part.runs = std::vector<Run>();
    part.reads = Reads(0);
  }
  return absl::OkStatus();
}

}  // namespace

// Fills the plan from the planner, once every request was planned: the
// reads in (file, offset) order; a read's copies: for each run of a
// planned region that reads it (regions in the order first asked for),
// each place in the ranks' lists where the region was asked for, the
// ranks in request order. Everything is laid out in the order it was
// made, not the reads': at a million reads every lookup out of order was
// a cache miss.
struct GlobalLoadAccess {
  static void Fill(Planner& planner, std::vector<Request>& requests, GlobalLoad& out) {
    Reads reads = planner.TakeReads();
    // Sorted on plain keys: the files (a cluster writes a few thousand)
    // ranked by name once.
    std::vector<uint32_t> by_name(reads.files.size());
    std::iota(by_name.begin(), by_name.end(), 0);
    std::sort(by_name.begin(), by_name.end(),
              [&](uint32_t a, uint32_t b) { return reads.files[a] < reads.files[b]; });
    std::vector<uint32_t> file_rank(reads.files.size());
    for (uint32_t k = 0; k < by_name.size(); ++k) file_rank[by_name[k]] = k;
    // The reads grouped by file in name order, then each file's sorted as
    // (offset, read) pairs: a few hundred per sort, not a million at once.
    std::vector<uint32_t> first(reads.files.size() + 1, 0);
    for (const Reads::Chunk& chunk : reads.chunks) ++first[file_rank[chunk.file] + 1];
    std::partial_sum(first.begin(), first.end(), first.begin());
    {
      std::vector<std::pair<uint64_t, uint32_t>> places(reads.chunks.size());  // (offset, read)
      std::vector<uint32_t> next(first.begin(), first.end() - 1);
      for (uint32_t r = 0; r < reads.chunks.size(); ++r) {
        places[next[file_rank[reads.chunks[r].file]]++] = {reads.chunks[r].file_offset, r};
      }
      for (size_t f = 0; f + 1 < first.size(); ++f) {
        std::sort(places.begin() + first[f], places.begin() + first[f + 1]);
      }
      out.order_.resize(places.size());
      for (size_t k = 0; k < places.size(); ++k) out.order_[k] = places[k].second;
    }
    // Each planned region's askers, in request order.
    const uint32_t regions = planner.planned_count();
    out.first_asker_.assign(regions + 1, 0);
    for (const Request& request : requests) ++out.first_asker_[request.planned + 1];
    std::partial_sum(out.first_asker_.begin(), out.first_asker_.end(), out.first_asker_.begin());
    out.askers_.resize(requests.size());
    {
      std::vector<uint32_t> next(out.first_asker_.begin(), out.first_asker_.end() - 1);
      for (const Request& request : requests) {
        out.askers_[next[request.planned]++] = GlobalLoad::Asker{request.rank, request.index};
      }
    }
    std::vector<Request>().swap(requests);  // as large as the askers
    // Each read's uses: the runs that copy from it, by planned region.
    out.first_use_.assign(reads.chunks.size() + 1, 0);
    for (uint32_t p = 0; p < regions; ++p) {
      for (const Run& run : planner.runs(planner.planned(p))) ++out.first_use_[run.read + 1];
    }
    std::partial_sum(out.first_use_.begin(), out.first_use_.end(), out.first_use_.begin());
    out.uses_.resize(out.first_use_.back());
    {
      std::vector<uint32_t> next(out.first_use_.begin(), out.first_use_.end() - 1);
      for (uint32_t p = 0; p < regions; ++p) {
        const Planned& planned = planner.planned(p);
        for (uint32_t i = 0; i < planned.runs; ++i) {
          const Run& run = planner.runs(planned)[i];
          out.uses_[next[run.read]++] = GlobalLoad::Use{p, planned.first_run + i};
        }
      }
    }
    out.runs_ = planner.TakeRuns();
    out.chunks_ = std::move(reads.chunks);
    out.files_ = std::move(reads.files);
  }
};

absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::CheckpointManifest& manifest,
                                            absl::Span<const v1::NodeLoadPlan> nodes) {
  return PlanLoad(manifest, nodes, RequestLimits{});
}

namespace {

// Plans into `global`, empty.
absl::Status PlanLoadInto(const ColumnManifest& manifest, absl::Span<const v1::NodeLoadPlan> nodes,
                          const RequestLimits& limits, int threads, GlobalLoad& global) {
  v1::LoadAssignment& out = global.header();
  // The planner reads the compact form only (coordinator.proto); hosts
  // already compact are not copied.
  std::vector<v1::NodeLoadPlan> compacted;
  if (!std::all_of(nodes.begin(), nodes.end(),
                   [](const v1::NodeLoadPlan& node) { return node.compact(); })) {
    compacted.assign(nodes.begin(), nodes.end());
    for (v1::NodeLoadPlan& node : compacted) {
      if (absl::Status s = CompactLoadPlan(node, limits); !s.ok()) return s;
    }
    nodes = compacted;
  }
  std::map<std::pair<std::string, int>, const v1::ObjectEntry*> objects;  // (key, rank)
  for (const v1::ObjectEntry& entry : manifest.header().objects()) {
    objects[{entry.key(), entry.rank()}] = &entry;
  }
  Planner planner(manifest, limits);
  const std::string& where = planner.where();
  std::vector<Request> requests;
  std::vector<int> tensor_of;   // of one rank's requests
  std::vector<uint64_t> pairs;  // of one rank's requests
  RankForms forms;
  std::vector<size_t> form_request;  // by form: its first rank's first request
  // By form: its first rank's sizes, which its replicas copy whole (a
  // lookup per request was a cache miss per replica's request).
  std::vector<const v1::LoadAssignment::RankSizes*> form_sizes;
  // The plan's regions, whatever their tensor (0): a rank's form is in
  // these numbers.
  RegionTable regions;
  // A host's tables, looked up where a rank first uses them.
  std::vector<int> host_tensor;      // manifest index; -1: not yet
  std::vector<int64_t> host_region;  // the plan's region number; -1: not yet
  absl::flat_hash_set<int> ranks_seen;
  out.set_step(manifest.header().step());
  {
    // One growth by doubling copied up to the whole list (50 MB at 4096
    // ranks x 1000 requests) into memory the kernel zeroes first.
    size_t total = 0;
    for (const v1::NodeLoadPlan& node : nodes) {
      for (const v1::NodeLoadPlan::RankRequests& rank : node.ranks()) {
        total += static_cast<size_t>(
            std::min<int64_t>(rank.request_tensors_size(), limits.max_tensors_per_plan));
      }
    }
    requests.reserve(total);
  }
  for (const v1::NodeLoadPlan& node : nodes) {
    if (absl::Status s = CheckCompactTables(node, limits); !s.ok()) return s;
    host_tensor.assign(node.tensors_size(), -1);
    host_region.assign(node.regions_size(), -1);
    for (const v1::NodeLoadPlan::RankRequests& rank : node.ranks()) {
      const auto who = [&] { return absl::StrCat("rank ", rank.rank()); };
      // The assignment's sizes and copies are by rank: one list each.
      if (rank.rank() < 0 || !ranks_seen.insert(rank.rank()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(who(), " on host ", node.host().host(),
                         rank.rank() < 0 ? " is negative" : " appears twice in the load"));
      }
      const int count = rank.request_tensors_size();
      if (count > limits.max_tensors_per_plan) {
        return absl::ResourceExhaustedError(
            absl::StrCat(who(), ": plan has ", count, " tensors; the limit is ",
                         limits.max_tensors_per_plan, " (--max_tensors_per_plan)"));
      }
      if (rank.object_keys_size() > limits.max_objects_per_plan) {
        return absl::ResourceExhaustedError(absl::StrCat(
            who(), ": plan has ", rank.object_keys_size(), " object keys; the limit is ",
            limits.max_objects_per_plan, " (--max_objects_per_plan)"));
      }
      if (rank.request_regions_size() != count || rank.tensors_size() > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(who(), " on host ", node.host().host(), ": ", count, " request tensors, ",
                         rank.request_regions_size(), " request regions and ", rank.tensors_size(),
                         " requests spelled out in a compact plan"));
      }
      v1::LoadAssignment::RankSizes* sizes = out.add_sizes();
      sizes->set_rank(rank.rank());
      sizes->mutable_tensor_bytes()->Reserve(count);
      tensor_of.clear();
      pairs.clear();
      for (int i = 0; i < count; ++i) {
        const uint32_t k = rank.request_tensors(i);
        const uint32_t j = rank.request_regions(i);
        if (k >= host_tensor.size() || j >= host_region.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat(who(), ": request ", i, " names tensor ", k, " and region ", j, " of ",
                           host_tensor.size(), " and ", host_region.size(), " its host listed"));
        }
        const v1::Region& region = node.regions(static_cast<int>(j));
        if (host_region[j] < 0) {
          // The region is read from here on: its size is checked first.
          const v1::Box& box = region.box();
          if (box.offsets_size() > limits.max_dims || box.lengths_size() > limits.max_dims) {
            v1::TensorShard request;
            *request.mutable_region() = region;
            request.set_fqn(node.tensors(static_cast<int>(k)).fqn());
            return WithContext(ValidateShardRequest(request, limits).status(), who());
          }
          host_region[j] = regions.Intern(0, region).first;
        }
        if (host_tensor[k] < 0) {
          absl::StatusOr<int> t =
              planner.TensorOf(node.tensors(static_cast<int>(k)), region, rank.rank());
          if (!t.ok()) return t.status();
          host_tensor[k] = *t;
        }
        tensor_of.push_back(host_tensor[k]);
        pairs.push_back(FormPair(host_tensor[k], static_cast<uint32_t>(host_region[j])));
      }
      // A replica of an earlier rank gets its copies.
      const auto [form, fresh_form] = forms.Intern(pairs);
      if (!fresh_form) {
        *sizes->mutable_tensor_bytes() = form_sizes[form]->tensor_bytes();
        for (int i = 0; i < count; ++i) {
          const uint32_t planned = requests[form_request[form] + i].planned;
          requests.push_back(Request{rank.rank(), static_cast<uint32_t>(i), planned});
        }
      } else {
        form_request.push_back(requests.size());
        form_sizes.push_back(sizes);
        for (int i = 0; i < count; ++i) {
          if (const int ahead = i + kPrefetchAhead; ahead < count) {
            planner.Prefetch(node.regions(static_cast<int>(rank.request_regions(ahead))),
                             tensor_of[ahead]);
          }
          absl::StatusOr<uint32_t> planned = planner.Plan(
              node.regions(static_cast<int>(rank.request_regions(i))), tensor_of[i], rank.rank());
          if (!planned.ok()) return planned.status();
          sizes->add_tensor_bytes(planner.planned(*planned).bytes);
          requests.push_back(Request{rank.rank(), static_cast<uint32_t>(i), *planned});
        }
      }
      for (int i = 0; i < rank.object_keys_size(); ++i) {
        const std::string& key = rank.object_keys(i);
        auto found = objects.find({key, rank.rank()});
        if (found == objects.end()) found = objects.find({key, -1});
        if (found == objects.end()) {
          return absl::NotFoundError(absl::StrCat("object ", key, " (rank ", rank.rank(),
                                                  " or global) is not in ", where));
        }
        v1::ObjectRead* read = out.add_objects();
        read->set_rank(rank.rank());
        read->set_request(i);
        *read->mutable_chunk() = found->second->chunk();
        read->set_key(key);
        sizes->add_object_bytes(found->second->chunk().length());
      }
    }
  }
  if (absl::Status s = planner.MapOntoChunks(PlanningThreads(threads)); !s.ok()) return s;
  GlobalLoadAccess::Fill(planner, requests, global);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::CheckpointManifest& manifest,
                                            absl::Span<const v1::NodeLoadPlan> nodes,
                                            const RequestLimits& limits, int threads) {
  absl::StatusOr<std::shared_ptr<const ColumnManifest>> columns =
      ColumnManifest::FromManifest(manifest);
  if (!columns.ok()) return columns.status();
  GlobalLoad global;
  if (absl::Status s = PlanLoadInto(**columns, nodes, limits, threads, global); !s.ok()) return s;
  v1::LoadAssignment out;
  global.ToAssignment(out);
  return out;
}

absl::StatusOr<std::shared_ptr<GlobalLoad>> PlanGlobalLoad(
    std::shared_ptr<const ColumnManifest> manifest, absl::Span<const v1::NodeLoadPlan> nodes,
    const RequestLimits& limits, int threads) {
  auto global = std::make_shared<GlobalLoad>();
  if (absl::Status s = PlanLoadInto(*manifest, nodes, limits, threads, *global); !s.ok()) {
    return s;
  }
  global->KeepAlive(std::move(manifest));
  return global;
}

absl::StatusOr<std::shared_ptr<GlobalLoad>> PlanGlobalLoad(const v1::CheckpointManifest& manifest,
                                                           absl::Span<const v1::NodeLoadPlan> nodes,
                                                           const RequestLimits& limits,
                                                           int threads) {
  absl::StatusOr<std::shared_ptr<const ColumnManifest>> columns =
      ColumnManifest::FromManifest(manifest);
  if (!columns.ok()) return columns.status();
  return PlanGlobalLoad(*std::move(columns), nodes, limits, threads);
}

}  // namespace ckpt::planning
