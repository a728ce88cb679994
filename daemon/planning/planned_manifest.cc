#include "daemon/planning/planned_manifest.h"

#include <algorithm>
#include <string>
#include <vector>

#include <google/protobuf/field_mask.pb.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/util/field_mask_util.h>

#include "daemon/planning/parallel_for.h"

namespace ckpt::planning {
namespace {

using google::protobuf::io::CodedOutputStream;

// A field's tag is one byte for these field numbers; an unset scalar
// takes none.
uint64_t VarintField(uint64_t value) {
  return value == 0 ? 0 : 1 + CodedOutputStream::VarintSize64(value);
}

// The template's fields but its tensors and their layouts, whatever fields
// the manifest has.
v1::CheckpointManifest HeaderOf(const v1::CheckpointManifest& kept) {
  google::protobuf::FieldMask header_fields;
  const google::protobuf::Descriptor* fields = v1::CheckpointManifest::descriptor();
  for (int f = 0; f < fields->field_count(); ++f) {
    const int number = fields->field(f)->number();
    if (number != v1::CheckpointManifest::kTensorsFieldNumber &&
        number != v1::CheckpointManifest::kShardLayoutsFieldNumber) {
      header_fields.add_paths(fields->field(f)->name());
    }
  }
  v1::CheckpointManifest header;
  google::protobuf::util::FieldMaskUtil::MergeMessageTo(
      kept, header_fields, google::protobuf::util::FieldMaskUtil::MergeOptions(), &header);
  return header;
}

// Tensor t of the template, into `tensor` (empty): a shard per region of
// its layout, its chunks cut from its item; its shards are the columns'
// from `first_shard` on.
void MakeTensor(const v1::SaveAssignment& assignment, int t, uint32_t first_shard,
                v1::TensorEntry& tensor) {
  const v1::CheckpointManifest& kept = assignment.manifest_template();
  const v1::TensorEntry& from = kept.tensors(t);
  // Each of its fields but the layout (a test counts them).
  tensor.set_fqn(from.fqn());
  tensor.set_dtype(from.dtype());
  *tensor.mutable_global_shape() = from.global_shape();
  tensor.set_partial(from.partial());
  if (from.layout() == 0) return;  // no shards
  const v1::ShardLayout& layout = kept.shard_layouts(static_cast<int>(from.layout() - 1));
  tensor.mutable_shards()->Reserve(layout.regions_size());
  for (int s = 0; s < layout.regions_size(); ++s) {
    const uint32_t i = first_shard + static_cast<uint32_t>(s);
    const v1::HostAssignment& host = assignment.hosts(static_cast<int>(assignment.shard_hosts(i)));
    const v1::WriteItem& item = host.items(static_cast<int>(assignment.shard_items(i)));
    v1::StoredShard& shard = *tensor.add_shards();
    *shard.mutable_region() = layout.regions(s);
    shard.set_writer_rank(item.rank());
    AddPlannedChunks(item, host.files(item.writer()), assignment.chunk_bytes(), shard);
  }
}

// How many shards tensor t of the template has: its layout's regions.
uint32_t ShardsOf(const v1::CheckpointManifest& kept, int t) {
  const uint32_t layout = kept.tensors(t).layout();
  return layout == 0 ? 0
                     : static_cast<uint32_t>(
                           kept.shard_layouts(static_cast<int>(layout - 1)).regions_size());
}

}  // namespace

uint64_t FramedFieldBytes(uint64_t bytes) {
  return 1 + CodedOutputStream::VarintSize64(bytes) + bytes;
}

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
  const uint64_t file = FramedFieldBytes(file_name_bytes);
  uint64_t total = 0;
  for (uint64_t offset = 0; offset < bytes; offset += chunk_bytes) {
    const uint64_t inner = file + VarintField(file_offset + offset) + VarintField(offset) +
                           VarintField(std::min(chunk_bytes, bytes - offset));
    total += FramedFieldBytes(inner);
  }
  return total;
}

v1::CheckpointManifest ManifestOf(const v1::SaveAssignment& assignment, int threads) {
  const v1::CheckpointManifest& kept = assignment.manifest_template();
  if (assignment.shard_hosts().empty()) return kept;
  // Made afresh, each shard's chunks right after it, as a manifest read
  // back is parsed: a copy of the template with the chunks added after
  // was walked out of order by every load of it.
  v1::CheckpointManifest manifest = HeaderOf(kept);
  // Where each tensor's shards start in the columns.
  std::vector<uint32_t> first(static_cast<size_t>(kept.tensors_size()) + 1, 0);
  for (int t = 0; t < kept.tensors_size(); ++t) {
    first[t + 1] = first[t] + ShardsOf(kept, t);
    manifest.add_tensors();
  }
  ParallelFor(static_cast<size_t>(kept.tensors_size()), PlanningThreads(threads), first.back(),
              kMinWorkPerRange, [&](size_t, size_t begin, size_t end) {
                for (size_t t = begin; t < end; ++t) {
                  MakeTensor(assignment, static_cast<int>(t), first[t],
                             *manifest.mutable_tensors(static_cast<int>(t)));
                }
              });
  return manifest;
}

v1::CheckpointManifest PlannedHeader(const v1::SaveAssignment& assignment) {
  return HeaderOf(assignment.manifest_template());
}

absl::Status ForEachPlannedTensor(const v1::SaveAssignment& assignment,
                                  absl::FunctionRef<absl::Status(v1::TensorEntry&)> each) {
  const v1::CheckpointManifest& kept = assignment.manifest_template();
  v1::TensorEntry tensor;
  uint32_t first = 0;
  for (int t = 0; t < kept.tensors_size(); ++t) {
    if (assignment.shard_hosts().empty()) {
      tensor = kept.tensors(t);
    } else {
      tensor.Clear();
      MakeTensor(assignment, t, first, tensor);
      first += static_cast<uint32_t>(tensor.shards_size());
    }
    if (absl::Status s = each(tensor); !s.ok()) return s;
  }
  return absl::OkStatus();
}

uint64_t PlannedManifestBytes(const v1::SaveAssignment& assignment) {
  // Each tensor made, one at a time (a cluster's manifest is gigabytes as
  // a message): the sizes of a shard's fields are the message's to count.
  uint64_t total = PlannedHeader(assignment).ByteSizeLong();
  (void)ForEachPlannedTensor(assignment, [&](v1::TensorEntry& tensor) {
    total += FramedFieldBytes(tensor.ByteSizeLong());
    return absl::OkStatus();
  });
  return total;
}

std::string SerializedManifestOf(const v1::SaveAssignment& assignment) {
  // A message's fields may come in any order, and a repeated field's
  // elements each as a field of its own: the header's, then each tensor's,
  // as a manifest of that tensor alone serializes it.
  std::string out = PlannedHeader(assignment).SerializeAsString();
  v1::CheckpointManifest one;
  (void)ForEachPlannedTensor(assignment, [&](v1::TensorEntry& tensor) {
    one.mutable_tensors()->AddAllocated(&tensor);
    one.AppendToString(&out);
    (void)one.mutable_tensors()->ReleaseLast();  // the tensor is the walk's
    return absl::OkStatus();
  });
  return out;
}

}  // namespace ckpt::planning
