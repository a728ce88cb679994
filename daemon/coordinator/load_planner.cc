#include "daemon/coordinator/load_planner.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/lib/dtype.h"
#include "proto/lib/geometry.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/status_context.h"

namespace ckpt::coordinator {
namespace {

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// By (file, offset): a chunk read once however many requests need it. The
// file names are the manifest's own strings, which outlive the planning; a
// hash map (sorted into the answer at the end) because a cluster-scale load
// adds runs to a million reads.
using Reads = absl::flat_hash_map<std::pair<absl::string_view, uint64_t>, v1::ChunkRead>;

// The stored shard's chunks must tile its packed bytes exactly: sorted by
// shard_offset, contiguous from 0, no gap, no overlap, no wrap. Runs are
// mapped onto chunks by offset, so anything else would copy bytes from
// outside the chunk read (a damaged or hostile manifest).
absl::Status CheckChunksTile(const v1::StoredShard& stored, uint64_t bytes,
                             const std::string& what) {
  uint64_t at = 0;
  for (const v1::StoredChunk& chunk : stored.chunks()) {
    if (chunk.shard_offset() != at || chunk.length() == 0 || chunk.length() > bytes - at) {
      return absl::DataLossError(absl::StrCat(
          what, ": chunk at shard offset ", chunk.shard_offset(), " of ", chunk.length(),
          " bytes (in ", chunk.file(), ") does not continue the shard's chunks at ", at, " of its ",
          bytes, " bytes"));
    }
    at += chunk.length();
  }
  if (at != bytes) {
    return absl::DataLossError(
        absl::StrCat(what, ": chunks hold ", at, " of the shard's ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

// Appends one CopyRun (count reps) to the read of `chunk`.
void Emit(const v1::StoredChunk& chunk, const std::string& fqn, int rank, uint32_t request,
          uint64_t in_chunk, uint64_t dst, uint64_t length, uint64_t count, uint64_t chunk_stride,
          uint64_t dest_stride, Reads& reads) {
  v1::ChunkRead& read = reads[{chunk.file(), chunk.file_offset()}];
  if (!read.has_chunk()) {
    *read.mutable_chunk() = chunk;
    read.set_fqn(fqn);
  }
  v1::CopyRun* copy = read.add_runs();
  copy->set_rank(rank);
  copy->set_request(request);
  copy->set_chunk_offset(in_chunk);
  copy->set_dest_offset(dst);
  copy->set_length(length);
  if (count > 1) {
    copy->set_count(count);
    copy->set_chunk_stride(chunk_stride);
    copy->set_dest_stride(dest_stride);
  }
}

// Maps the strided run onto the stored shard's chunks (which tile it, see
// CheckChunksTile): the repetitions that fall inside one chunk become one
// strided CopyRun; a repetition that straddles chunk boundaries is cut into
// single runs. Cost: the chunks the run crosses plus its straddling
// repetitions, at most one per chunk boundary.
void AddRunToChunks(const v1::StoredShard& stored, const std::string& fqn, int rank,
                    uint32_t request, const geo::StridedRun& run, Reads& reads) {
  const auto& chunks = stored.chunks();
  auto chunk_at = [&](uint64_t offset) {
    auto it =
        std::upper_bound(chunks.begin(), chunks.end(), offset,
                         [](uint64_t o, const v1::StoredChunk& c) { return o < c.shard_offset(); });
    return it - 1;  // the first chunk starts at 0 <= offset
  };
  const uint64_t n = static_cast<uint64_t>(run.count);
  const uint64_t length = static_cast<uint64_t>(run.length);
  const uint64_t ss = static_cast<uint64_t>(run.src_stride);
  const uint64_t ds = static_cast<uint64_t>(run.dst_stride);
  uint64_t k = 0;
  while (k < n) {
    const uint64_t start = static_cast<uint64_t>(run.src_offset) + k * ss;
    const uint64_t dst = static_cast<uint64_t>(run.dst_offset) + k * ds;
    auto it = chunk_at(start);
    const uint64_t chunk_end = it->shard_offset() + it->length();
    if (start + length <= chunk_end) {
      const uint64_t last =
          n == 1 ? k : std::min<uint64_t>(n - 1, k + (chunk_end - start - length) / ss);
      Emit(*it, fqn, rank, request, start - it->shard_offset(), dst, length, last - k + 1, ss, ds,
           reads);
      k = last + 1;
      continue;
    }
    uint64_t src = start;
    uint64_t to = dst;
    uint64_t left = length;
    for (; left > 0; ++it) {
      const uint64_t in_chunk = src - it->shard_offset();
      const uint64_t piece = std::min<uint64_t>(left, it->length() - in_chunk);
      Emit(*it, fqn, rank, request, in_chunk, to, piece, 1, 0, 0, reads);
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
    int shard = 0;  // index into the TensorEntry's shards
    geo::Region region;
  };
  std::vector<Entry> by_begin;
  int64_t longest = 0;
};

absl::StatusOr<StoredIndex> IndexStoredShards(const v1::TensorEntry& entry, const geo::Shape& shape,
                                              const std::string& where) {
  StoredIndex index;
  index.by_begin.reserve(entry.shards_size());
  for (int k = 0; k < entry.shards_size(); ++k) {
    StoredIndex::Entry e;
    e.shard = k;
    e.region = RegionFromProto(entry.shards(k).region());
    absl::StatusOr<std::pair<int64_t, int64_t>> span = geo::RegionSpan(shape, e.region);
    if (!span.ok()) {
      return WithContext(span.status(), absl::StrCat(where, " tensor ", entry.fqn(), " shard ", k,
                                                     ", its stored region"));
    }
    if (span->first >= span->second) continue;  // empty: meets nothing
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

}  // namespace

absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::CheckpointManifest& manifest,
                                            absl::Span<const v1::NodeLoadPlan> nodes) {
  return PlanLoad(manifest, nodes, RequestLimits{});
}

absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::CheckpointManifest& manifest,
                                            absl::Span<const v1::NodeLoadPlan> nodes,
                                            const RequestLimits& limits) {
  absl::flat_hash_map<absl::string_view, const v1::TensorEntry*> tensors;
  for (const v1::TensorEntry& entry : manifest.tensors()) tensors[entry.fqn()] = &entry;
  std::map<std::pair<std::string, int>, const v1::ObjectEntry*> objects;  // (key, rank)
  for (const v1::ObjectEntry& entry : manifest.objects()) {
    objects[{entry.key(), entry.rank()}] = &entry;
  }
  const std::string where = absl::StrCat("checkpoint ", manifest.job(), " step ", manifest.step());

  v1::LoadAssignment out;
  out.set_step(manifest.step());
  Reads reads;
  std::map<const v1::StoredShard*, absl::Status> tiles;   // checked once per stored shard
  std::map<const v1::TensorEntry*, StoredIndex> indexes;  // built on a tensor's first request
  for (const v1::NodeLoadPlan& node : nodes) {
    for (const v1::NodeLoadPlan::RankRequests& rank : node.ranks()) {
      v1::LoadAssignment::RankSizes* sizes = out.add_sizes();
      sizes->set_rank(rank.rank());
      for (int i = 0; i < rank.tensors_size(); ++i) {
        const v1::TensorShard& request = rank.tensors(i);
        if (rank.tensors_size() > limits.max_tensors_per_plan) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "rank ", rank.rank(), ": plan has ", rank.tensors_size(), " tensors; the limit is ",
              limits.max_tensors_per_plan, " (--max_tensors_per_plan)"));
        }
        if (absl::StatusOr<int64_t> b = ValidateShardRequest(request, limits); !b.ok()) {
          return WithContext(b.status(), absl::StrCat("rank ", rank.rank()));
        }
        absl::StatusOr<ShardGeometry> g = ValidateShard(request);
        if (!g.ok()) return g.status();
        auto found = tensors.find(request.fqn());
        if (found == tensors.end()) {
          return absl::NotFoundError(absl::StrCat("tensor ", request.fqn(), " is not in ", where));
        }
        const v1::TensorEntry& entry = *found->second;
        if (entry.dtype() != request.dtype() ||
            !std::equal(entry.global_shape().begin(), entry.global_shape().end(),
                        request.global_shape().begin(), request.global_shape().end())) {
          return absl::InvalidArgumentError(
              absl::StrCat("tensor ", request.fqn(), ": rank ", rank.rank(), " asks for dtype ",
                           DTypeName(request.dtype()), " shape ",
                           ShapeString(request.global_shape()), " but ", where, " holds dtype ",
                           DTypeName(entry.dtype()), " shape ", ShapeString(entry.global_shape())));
        }
        sizes->add_tensor_bytes(g->bytes);
        auto [indexed, fresh] = indexes.try_emplace(&entry);
        if (fresh) {
          absl::StatusOr<StoredIndex> built = IndexStoredShards(entry, g->shape, where);
          if (!built.ok()) return built.status();
          indexed->second = std::move(*built);
        }
        const StoredIndex& index = indexed->second;
        absl::StatusOr<std::pair<int64_t, int64_t>> want = geo::RegionSpan(g->shape, g->region);
        if (!want.ok()) return want.status();
        int64_t covered = 0;
        auto first = std::lower_bound(
            index.by_begin.begin(), index.by_begin.end(), want->first - index.longest,
            [](const StoredIndex::Entry& e, int64_t at) { return e.begin < at; });
        for (auto it = first; it != index.by_begin.end() && it->begin < want->second; ++it) {
          if (it->end <= want->first) continue;
          const int k = it->shard;
          const v1::StoredShard& stored = entry.shards(k);
          const auto what = [&] {
            return absl::StrCat(where, " tensor ", entry.fqn(), " shard ", k);
          };
          absl::StatusOr<std::vector<geo::StridedRun>> runs = geo::IntersectRegionsStrided(
              g->shape, g->element_size, it->region, g->region, limits.max_runs_per_shard);
          if (!runs.ok()) return WithContext(runs.status(), what());
          if (runs->empty()) continue;
          auto [tile, unchecked] = tiles.try_emplace(&stored);
          if (unchecked) {
            // The region was validated by the intersection, and its bytes fit.
            const int64_t bytes = *geo::RegionNumElements(g->shape, it->region) * g->element_size;
            tile->second = CheckChunksTile(stored, static_cast<uint64_t>(bytes), what());
          }
          if (!tile->second.ok()) return tile->second;
          for (const geo::StridedRun& run : *runs) {
            AddRunToChunks(stored, entry.fqn(), rank.rank(), i, run, reads);
            covered += run.length * run.count;
          }
        }
        if (covered != g->bytes) {
          return absl::FailedPreconditionError(absl::StrCat(
              "tensor ", request.fqn(), " region ", g->region.DebugString(), ": ", where,
              " holds only ", covered, " of the ", g->bytes, " bytes asked for (partial save)"));
        }
      }
      if (rank.object_keys_size() > limits.max_objects_per_plan) {
        return absl::ResourceExhaustedError(
            absl::StrCat("rank ", rank.rank(), ": plan has ", rank.object_keys_size(),
                         " object keys; the limit is ", limits.max_objects_per_plan,
                         " (--max_objects_per_plan)"));
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
  std::vector<std::pair<std::pair<absl::string_view, uint64_t>, v1::ChunkRead*>> sorted;
  sorted.reserve(reads.size());
  for (auto& [key, read] : reads) sorted.emplace_back(key, &read);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  out.mutable_reads()->Reserve(static_cast<int>(sorted.size()));
  for (auto& [key, read] : sorted) *out.add_reads() = std::move(*read);
  return out;
}

}  // namespace ckpt::coordinator
