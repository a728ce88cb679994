#include "daemon/planning/planned_manifest.h"

#include <algorithm>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>

#include "daemon/planning/parallel_for.h"

namespace ckpt::planning {
namespace {

using google::protobuf::io::CodedOutputStream;

// A field's tag is one byte for these field numbers; an unset scalar
// takes none.
uint64_t VarintField(uint64_t value) {
  return value == 0 ? 0 : 1 + CodedOutputStream::VarintSize64(value);
}

}  // namespace

void AddPlannedChunks(const v1::WriteItem& item, const std::string& file, uint64_t chunk_bytes,
                      v1::StoredShard& shard) {
  const uint64_t bytes = item.bytes();
  shard.mutable_chunks()->Reserve(static_cast<int>((bytes + chunk_bytes - 1) / chunk_bytes));
  for (uint64_t offset = 0; offset < bytes; offset += chunk_bytes) {
    v1::StoredChunk* chunk = shard.add_chunks();
    chunk->set_file(file);
    chunk->set_file_offset(item.file_offset() + offset);
    chunk->set_shard_offset(offset);
    chunk->set_length(std::min(chunk_bytes, bytes - offset));
  }
}

uint64_t PlannedChunksWireBytes(uint64_t bytes, uint64_t file_offset, size_t file_name_bytes,
                                uint64_t chunk_bytes) {
  const uint64_t file = 1 + CodedOutputStream::VarintSize64(file_name_bytes) + file_name_bytes;
  uint64_t total = 0;
  for (uint64_t offset = 0; offset < bytes; offset += chunk_bytes) {
    const uint64_t inner = file + VarintField(file_offset + offset) + VarintField(offset) +
                           VarintField(std::min(chunk_bytes, bytes - offset));
    total += 1 + CodedOutputStream::VarintSize64(inner) + inner;
  }
  return total;
}

v1::CheckpointManifest ManifestOf(const v1::SaveAssignment& assignment, int threads) {
  v1::CheckpointManifest manifest = assignment.manifest_template();
  if (assignment.shard_hosts().empty()) return manifest;
  // Where each tensor's shards start in the columns.
  std::vector<uint32_t> first(static_cast<size_t>(manifest.tensors_size()) + 1, 0);
  for (int t = 0; t < manifest.tensors_size(); ++t) {
    first[t + 1] = first[t] + static_cast<uint32_t>(manifest.tensors(t).shards_size());
  }
  const uint64_t chunk_bytes = assignment.chunk_bytes();
  ParallelFor(static_cast<size_t>(manifest.tensors_size()), PlanningThreads(threads), first.back(),
              kMinWorkPerRange, [&](size_t, size_t begin, size_t end) {
                for (size_t t = begin; t < end; ++t) {
                  v1::TensorEntry& tensor = *manifest.mutable_tensors(static_cast<int>(t));
                  for (int s = 0; s < tensor.shards_size(); ++s) {
                    const uint32_t i = first[t] + static_cast<uint32_t>(s);
                    const v1::HostAssignment& host =
                        assignment.hosts(static_cast<int>(assignment.shard_hosts(i)));
                    const v1::WriteItem& item =
                        host.items(static_cast<int>(assignment.shard_items(i)));
                    AddPlannedChunks(item, host.files(item.writer()), chunk_bytes,
                                     *tensor.mutable_shards(s));
                  }
                }
              });
  return manifest;
}

}  // namespace ckpt::planning
