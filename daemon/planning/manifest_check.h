// Validation of a MANIFEST read from disk. A manifest is untrusted input: its
// CRC trailer only proves it was not torn, not that whoever wrote it (a copy
// from another directory, another job on a shared mount, a hostile user) told
// the truth. Everything that reads a manifest (load planning, verify,
// inspect, list) sees it only after ValidateManifest, so later code may
// assume: the manifest is the one of the directory asked for; every file
// name stays in the step directory; every tensor's dtype, shape and regions
// are valid with overflow-checked sizes; every shard's chunks exactly tile
// its packed bytes, in order; no two chunks share a byte of a file; no
// offset + length wraps; and every count is bounded, so walking it costs at
// most what the limits allow.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef CKPT_DAEMON_PLANNING_MANIFEST_CHECK_H_
#define CKPT_DAEMON_PLANNING_MANIFEST_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/manifest.pb.h"

namespace ckpt::planning {

// What a manifest may hold. The defaults are far beyond what a real save
// writes and small enough that reading one cannot exhaust the daemon.
struct ManifestLimits {
  uint64_t max_manifest_bytes = uint64_t{256} << 20;  // the MANIFEST file
  // Reading one: its bytes, the parsed message and the checks, estimated
  // before it is parsed (manifest_footprint.h).
  uint64_t max_memory_bytes = uint64_t{256} << 20;
  int64_t max_tensors = 1 << 20;
  int64_t max_shards = 1 << 22;  // over all tensors
  int64_t max_chunks = 1 << 24;  // over all shards and objects
  int64_t max_objects = 1 << 20;
  int max_dims = 64;
  int64_t max_metadata_entries = 4096;
  uint64_t max_metadata_bytes = uint64_t{1} << 20;  // keys + values
  uint64_t max_chunk_bytes = uint64_t{1} << 32;     // one tensor chunk
  uint64_t max_object_bytes = uint64_t{1} << 32;    // one object
};

inline constexpr uint32_t kManifestFormatVersion = 1;

// OK, or DATA_LOSS "<source>: <what is wrong, naming tensor/object/chunk>"
// (FAILED_PRECONDITION when a limit is exceeded). `job` and `step` are those
// of the directory the manifest was read from. The tensors are checked on
// up to `threads` threads (parallel_for.h); the answer is the same.
absl::Status ValidateManifest(const v1::CheckpointManifest& manifest, absl::string_view job,
                              int64_t step, absl::string_view source,
                              const ManifestLimits& limits = {}, int threads = 1);

// A string from a manifest as errors print it: escaped, cut to 80 bytes,
// in quotes, so a hostile manifest cannot forge or flood an error message.
std::string QuotedForError(absl::string_view text);

// A chunk's bytes in its file, for the check that no two chunks share a
// byte; `object`: the owner's index among the manifest's objects.
struct ChunkExtent {
  absl::string_view file;
  uint64_t offset = 0;
  uint64_t length = 0;
  int object = -1;
};

// What ValidateManifest checks of a compact root (format 3) that is not
// in its tensors' shards and chunks, which its reader checks as it reads
// the chunk tables (column_manifest_read.h): job and step, the counts of
// tensors and objects, the metadata, the delta base, no tensor named twice,
// and every object. Each object's non-empty chunk is appended to
// `object_extents` (pointing into `root`) for the reader's check that no
// two chunks share a byte. The same errors as ValidateManifest.
absl::Status ValidateCompactRoot(const v1::CheckpointManifest& root, absl::string_view job,
                                 int64_t step, absl::string_view source,
                                 const ManifestLimits& limits,
                                 std::vector<ChunkExtent>& object_extents);

// A save plan's manifest (SaveAssignment.manifest_template, whose tensors
// name layouts of their shards' regions, and whose shards list no chunks
// yet: planned_manifest.h), checked as
// ValidateManifest checks the manifest ManifestOf makes of it, but for what
// the planner makes so: each shard's chunks tile it in order, at offsets
// no other item's take, in one of its host's files. `shard_chunks`: how
// many chunks the shards will list; `longest_chunk`: the longest's bytes.
absl::Status ValidatePlannedManifest(const v1::SaveAssignment& plan, int64_t shard_chunks,
                                     uint64_t longest_chunk, absl::string_view source,
                                     const ManifestLimits& limits, int threads);

// A chunk's encoding fields (proto/lib/stored_chunk.h) are consistent: a
// known codec; an encoded chunk stores 1 to `length` bytes, and
// grouped-zstd names an element size of 1 to 16. DATA_LOSS
// "<where>: <what>" otherwise. Part of ValidateManifest; the committer
// checks hosts' reports with it too.
absl::Status CheckChunkEncoding(const v1::StoredChunk& chunk, absl::string_view where);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_MANIFEST_CHECK_H_
