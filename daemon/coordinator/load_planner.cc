#include "daemon/coordinator/load_planner.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/lib/dtype.h"
#include "proto/lib/geometry.h"
#include "proto/lib/region_convert.h"

namespace ckpt::coordinator {
namespace {

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Maps the byte run [src, src + length) of a stored shard onto its chunks and
// appends the pieces to the per-chunk reads.
void AddRunToChunks(const v1::StoredShard& stored, const std::string& fqn, int rank,
                    uint32_t request, const geo::ByteRun& run,
                    std::map<std::pair<std::string, uint64_t>, v1::ChunkRead>& reads) {
  // Chunks are sorted by shard_offset; find the first that contains src.
  const auto& chunks = stored.chunks();
  auto it = std::upper_bound(chunks.begin(), chunks.end(), static_cast<uint64_t>(run.src_offset),
                             [](uint64_t offset, const v1::StoredChunk& c) {
                               return offset < c.shard_offset();
                             });
  --it;  // src >= first chunk's offset (0), so this stays in range
  uint64_t src = run.src_offset;
  uint64_t dst = run.dst_offset;
  uint64_t left = run.length;
  for (; left > 0; ++it) {
    const uint64_t in_chunk = src - it->shard_offset();
    const uint64_t piece = std::min<uint64_t>(left, it->length() - in_chunk);
    v1::ChunkRead& read = reads[{it->file(), it->file_offset()}];
    if (!read.has_chunk()) {
      *read.mutable_chunk() = *it;
      read.set_fqn(fqn);
    }
    v1::CopyRun* copy = read.add_runs();
    copy->set_rank(rank);
    copy->set_request(request);
    copy->set_chunk_offset(in_chunk);
    copy->set_dest_offset(dst);
    copy->set_length(piece);
    src += piece;
    dst += piece;
    left -= piece;
  }
}

}  // namespace

absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::CheckpointManifest& manifest,
                                            absl::Span<const v1::NodeLoadPlan> nodes) {
  std::map<std::string, const v1::TensorEntry*> tensors;
  for (const v1::TensorEntry& entry : manifest.tensors()) tensors[entry.fqn()] = &entry;
  std::map<std::pair<std::string, int>, const v1::ObjectEntry*> objects;  // (key, rank)
  for (const v1::ObjectEntry& entry : manifest.objects()) {
    objects[{entry.key(), entry.rank()}] = &entry;
  }
  const std::string where = absl::StrCat("checkpoint ", manifest.job(), " step ", manifest.step());

  v1::LoadAssignment out;
  out.set_step(manifest.step());
  std::map<std::pair<std::string, uint64_t>, v1::ChunkRead> reads;
  for (const v1::NodeLoadPlan& node : nodes) {
    for (const v1::NodeLoadPlan::RankRequests& rank : node.ranks()) {
      v1::LoadAssignment::RankSizes* sizes = out.add_sizes();
      sizes->set_rank(rank.rank());
      for (int i = 0; i < rank.tensors_size(); ++i) {
        const v1::TensorShard& request = rank.tensors(i);
        absl::StatusOr<ShardGeometry> g = ValidateShard(request);
        if (!g.ok()) {
          return absl::Status(g.status().code(),
                              absl::StrCat("rank ", rank.rank(), ": ", g.status().message()));
        }
        auto found = tensors.find(request.fqn());
        if (found == tensors.end()) {
          return absl::NotFoundError(
              absl::StrCat("tensor ", request.fqn(), " is not in ", where));
        }
        const v1::TensorEntry& entry = *found->second;
        if (entry.dtype() != request.dtype() ||
            !std::equal(entry.global_shape().begin(), entry.global_shape().end(),
                        request.global_shape().begin(), request.global_shape().end())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "tensor ", request.fqn(), ": rank ", rank.rank(), " asks for dtype ",
              DTypeName(request.dtype()), " shape ", ShapeString(request.global_shape()),
              " but ", where, " holds dtype ", DTypeName(entry.dtype()), " shape ",
              ShapeString(entry.global_shape())));
        }
        sizes->add_tensor_bytes(g->bytes);
        int64_t covered = 0;
        for (const v1::StoredShard& stored : entry.shards()) {
          absl::StatusOr<std::vector<geo::ByteRun>> runs = geo::IntersectRegions(
              g->shape, g->element_size, RegionFromProto(stored.region()), g->region);
          if (!runs.ok()) return runs.status();
          for (const geo::ByteRun& run : *runs) {
            AddRunToChunks(stored, entry.fqn(), rank.rank(), i, run, reads);
            covered += run.length;
          }
        }
        if (covered != g->bytes) {
          return absl::FailedPreconditionError(absl::StrCat(
              "tensor ", request.fqn(), " region ", g->region.DebugString(), ": ", where,
              " holds only ", covered, " of the ", g->bytes, " bytes asked for (partial save)"));
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
  for (auto& [key, read] : reads) *out.add_reads() = std::move(read);
  return out;
}

}  // namespace ckpt::coordinator
