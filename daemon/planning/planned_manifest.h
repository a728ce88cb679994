// The manifest a save plan commits, made from the plan when it is needed.
//
// A save plan (save_planner.h) keeps the manifest it will commit as a
// template that lists no shards: each tensor names a layout of the
// template (shard_layouts, as a compact root does: compact_root.h), its
// shards' regions in order, and every chunk of a shard is cut from the
// item that writes it (its file, offset and length), so the plan keeps,
// per shard, only which item that is (coordinator.proto
// SaveAssignment.shard_hosts and shard_items); the item's rank is the
// shard's writer. A chunk per shard was most of a cluster's plan (1.3 GiB
// of the plan cache at 32,768 ranks), then a region per shard (3 GiB at
// 131,072). ManifestOf lists the shards and puts the chunks in, as the
// commit writes them: CRCs 0, the commit fills them in from the hosts'
// reports.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_PLANNING_PLANNED_MANIFEST_H_
#define CKPT_DAEMON_PLANNING_PLANNED_MANIFEST_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "ckpt/v1/coordinator.pb.h"

namespace ckpt::planning {

// The template with every shard listed with its chunks, on up to
// `threads` threads (parallel_for.h; 0: the default). An assignment whose
// template lists its shards and chunks (no shard columns: as a node is
// sent it) comes back as it is.
v1::CheckpointManifest ManifestOf(const v1::SaveAssignment& assignment, int threads = 0);

// ManifestOf(assignment) a part at a time, for a commit that writes it
// split (manifest_tables.h ManifestSplitter) and so need not hold it
// whole: the header (every field but the tensors), then each tensor, in
// order, made when `each` is called with it. Stops at `each`'s first
// error. An assignment whose template lists its shards gives its own.
v1::CheckpointManifest PlannedHeader(const v1::SaveAssignment& assignment);
absl::Status ForEachPlannedTensor(const v1::SaveAssignment& assignment,
                                  absl::FunctionRef<absl::Status(v1::TensorEntry&)> each);

// The bytes ManifestOf's message serializes to (parsed, the same message),
// made a tensor at a time: at 131,072 ranks the whole message is 7 GB
// more than the plan.
std::string SerializedManifestOf(const v1::SaveAssignment& assignment);

// ManifestOf(assignment).ByteSizeLong(), counted a tensor at a time.
uint64_t PlannedManifestBytes(const v1::SaveAssignment& assignment);

// The shard's chunks, cut from `item` as ManifestOf cuts them.
void AddPlannedChunks(const v1::WriteItem& item, const std::string& file, uint64_t chunk_bytes,
                      v1::StoredShard& shard);

// A length-delimited field of `bytes` bytes on the wire: its tag (one byte
// for the manifest's fields), its length, then it.
uint64_t FramedFieldBytes(uint64_t bytes);

// What the chunks of an item of `bytes` at `file_offset` in a file named
// `file_name_bytes` long add to the manifest's wire size, CRCs not counted
// (the commit fills them in).
uint64_t PlannedChunksWireBytes(uint64_t bytes, uint64_t file_offset, size_t file_name_bytes,
                                uint64_t chunk_bytes);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_PLANNED_MANIFEST_H_
