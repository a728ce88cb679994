// Compact roots (format 3, docs/manifest.md): a split manifest's root that
// lists each shard layout once. The tensors of a model are stored alike
// (its layers, saved by the same ranks), so a cluster's root of millions
// of shards holds a few layouts of regions, and per tensor three packed
// columns (each shard's chunk table, chunk count and writer rank): a few
// bytes per shard, not a message with a region each. A host that reads
// the root and its own files' tables then reads little more than its own.
//
// Readers expand a compact root into format 2 (one StoredShard per shard)
// before joining its chunk tables (manifest_tables.h), after checking it
// against the limits: an untrusted root of a few bytes per shard must not
// expand into more memory than --max_manifest_memory_bytes allows.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef CKPT_DAEMON_PLANNING_COMPACT_ROOT_H_
#define CKPT_DAEMON_PLANNING_COMPACT_ROOT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/manifest_check.h"

namespace ckpt::planning {

inline constexpr uint32_t kCompactRootFormatVersion = 3;

// Where a split put one shard: its chunk table (1-based; 0 for none) and
// how many of its chunks the table lists.
struct ShardPlace {
  uint32_t table = 0;
  uint32_t chunks = 0;
};

// Whether a tensor's shards have a layout's regions, in order; tensors
// SameShardRegions finds alike have the same ShardRegionsHash.
bool SameShardRegions(const v1::TensorEntry& tensor, const v1::ShardLayout& layout);
size_t ShardRegionsHash(const v1::TensorEntry& tensor);

// Fills the tensors of `root`, copies of m's without shards, with their
// layouts (in root.shard_layouts, each distinct list of regions once) and
// columns; `places` holds each shard's, numbered over all tensors. Every
// shard of `m` has its region set: expanded, each shard's is.
void FillCompactShards(const v1::CheckpointManifest& m, absl::Span<const ShardPlace> places,
                       v1::CheckpointManifest& root);

// FillCompactShards a tensor at a time, for a manifest split as it is
// made (manifest_tables.h ManifestSplitter): the same layouts, numbered
// alike.
class CompactShards {
 public:
  // `out`, tensor's entry in `root` (a copy without shards), gets its
  // layout and columns; `places` holds its shards'.
  void Fill(const v1::TensorEntry& tensor, absl::Span<const ShardPlace> places,
            v1::TensorEntry& out, v1::CheckpointManifest& root);

 private:
  absl::flat_hash_map<size_t, std::vector<uint32_t>> layouts_by_hash_;  // 1-based layouts
};

// The memory a format-3 `root` takes once expanded: each shard's message,
// its slot and its region. Checks first that every tensor lists no shard
// of its own and names a layout the root holds (0 with no columns), with
// columns as long as the layout; and that the shards are within
// --max_manifest_shards. DATA_LOSS naming `source` and the tensor, or
// FAILED_PRECONDITION naming the flag. Cost: the layouts' regions plus the
// tensors, not the shards.
absl::StatusOr<uint64_t> CheckCompactRoot(const v1::CheckpointManifest& root,
                                          absl::string_view source, const ManifestLimits& limits);

// A root that passed CheckCompactRoot, made format 2: each tensor's shards
// listed, with their regions, tables, chunk counts and writer ranks.
void ExpandCompactRoot(v1::CheckpointManifest& root);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_COMPACT_ROOT_H_
