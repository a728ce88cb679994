#include "daemon/planning/compact_root.h"

#include <cstddef>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/planning/manifest_footprint.h"
#include "daemon/planning/manifest_tables.h"
#include "proto/lib/region_convert.h"

namespace ckpt::planning {

size_t ShardRegionsHash(const v1::TensorEntry& tensor) {
  size_t h = absl::HashOf(tensor.shards_size());
  for (const v1::StoredShard& shard : tensor.shards()) h = HashRegion(h, shard.region());
  return h;
}

bool SameShardRegions(const v1::TensorEntry& tensor, const v1::ShardLayout& layout) {
  if (tensor.shards_size() != layout.regions_size()) return false;
  for (int s = 0; s < tensor.shards_size(); ++s) {
    if (!SameRegion(tensor.shards(s).region(), layout.regions(s))) return false;
  }
  return true;
}

void CompactShards::Fill(const v1::TensorEntry& tensor, absl::Span<const ShardPlace> places,
                         v1::TensorEntry& out, v1::CheckpointManifest& root) {
  const int n = tensor.shards_size();
  if (n == 0) return;
  std::vector<uint32_t>& alike = layouts_by_hash_[ShardRegionsHash(tensor)];
  uint32_t layout = 0;
  for (uint32_t l : alike) {
    if (SameShardRegions(tensor, root.shard_layouts(static_cast<int>(l - 1)))) {
      layout = l;
      break;
    }
  }
  if (layout == 0) {
    v1::ShardLayout& fresh = *root.add_shard_layouts();
    fresh.mutable_regions()->Reserve(n);
    for (const v1::StoredShard& shard : tensor.shards()) *fresh.add_regions() = shard.region();
    layout = static_cast<uint32_t>(root.shard_layouts_size());
    alike.push_back(layout);
  }
  out.set_layout(layout);
  out.mutable_shard_tables()->Reserve(n);
  out.mutable_shard_chunk_counts()->Reserve(n);
  out.mutable_shard_writer_ranks()->Reserve(n);
  for (int s = 0; s < n; ++s) {
    out.add_shard_tables(places[s].table);
    out.add_shard_chunk_counts(places[s].chunks);
    out.add_shard_writer_ranks(tensor.shards(s).writer_rank());
  }
}

void FillCompactShards(const v1::CheckpointManifest& m, absl::Span<const ShardPlace> places,
                       v1::CheckpointManifest& root) {
  CompactShards compact;
  size_t shard_number = 0;
  for (int t = 0; t < m.tensors_size(); ++t) {
    const v1::TensorEntry& tensor = m.tensors(t);
    compact.Fill(tensor, places.subspan(shard_number, tensor.shards_size()),
                 *root.mutable_tensors(t), root);
    shard_number += tensor.shards_size();
  }
}

absl::StatusOr<uint64_t> CheckCompactRoot(const v1::CheckpointManifest& root,
                                          absl::string_view source, const ManifestLimits& limits) {
  // Each layout's shards' memory, once: the tensors repeat them.
  std::vector<uint64_t> layout_bytes;
  layout_bytes.reserve(root.shard_layouts_size());
  for (const v1::ShardLayout& layout : root.shard_layouts()) {
    uint64_t bytes = 0;
    for (const v1::Region& region : layout.regions()) {
      bytes = SatAdd(bytes, ExpandedShardBytes(region));
    }
    layout_bytes.push_back(bytes);
  }
  int64_t shards = 0;
  uint64_t bytes = 0;
  for (const v1::TensorEntry& tensor : root.tensors()) {
    const auto lost = [&](auto... what) {
      return absl::DataLossError(absl::StrCat(
          source, ": tensor \"", absl::CHexEscape(tensor.fqn().substr(0, 80)), "\" ", what...));
    };
    if (tensor.shards_size() > 0) return lost("lists shards in a compact root");
    const uint32_t layout = tensor.layout();
    if (layout > static_cast<uint32_t>(root.shard_layouts_size())) {
      return lost("names shard layout ", layout, " of the root's ", root.shard_layouts_size());
    }
    const int n = layout == 0 ? 0 : root.shard_layouts(static_cast<int>(layout - 1)).regions_size();
    if (tensor.shard_tables_size() != n || tensor.shard_chunk_counts_size() != n ||
        tensor.shard_writer_ranks_size() != n) {
      return lost("has ", tensor.shard_tables_size(), " tables, ", tensor.shard_chunk_counts_size(),
                  " chunk counts and ", tensor.shard_writer_ranks_size(), " writer ranks for the ",
                  n, " shards of its layout");
    }
    // Checked before the sum grows: it does not wrap.
    if (n > limits.max_shards - shards) {
      return absl::FailedPreconditionError(
          absl::StrCat(source, ": the compact root holds more than ", limits.max_shards,
                       " shards (--max_manifest_shards); it was not read"));
    }
    shards += n;
    if (layout != 0) bytes = SatAdd(bytes, layout_bytes[layout - 1]);
  }
  return bytes;
}

void ExpandCompactRoot(v1::CheckpointManifest& root) {
  for (v1::TensorEntry& tensor : *root.mutable_tensors()) {
    if (tensor.layout() != 0) {
      const v1::ShardLayout& layout = root.shard_layouts(static_cast<int>(tensor.layout() - 1));
      auto& shards = *tensor.mutable_shards();
      shards.Reserve(layout.regions_size());
      for (int s = 0; s < layout.regions_size(); ++s) {
        v1::StoredShard& shard = *shards.Add();
        // Set, as every shard of a compact root had it (manifest_tables.h).
        *shard.mutable_region() = layout.regions(s);
        shard.set_writer_rank(tensor.shard_writer_ranks(s));
        shard.set_table(tensor.shard_tables(s));
        shard.set_chunk_count(tensor.shard_chunk_counts(s));
      }
    }
    tensor.set_layout(0);
    tensor.clear_shard_tables();
    tensor.clear_shard_chunk_counts();
    tensor.clear_shard_writer_ranks();
  }
  root.clear_shard_layouts();
  root.set_format_version(kSplitManifestFormatVersion);
}

}  // namespace ckpt::planning
