// Reading a checkpoint's manifest into columns (column_manifest.h) for a
// load. A compact root (format 3) and its chunk tables are read straight
// into the columns, never joined into a message per chunk: at 131,072
// ranks the joined manifest is 6.5 GB and its columns 0.6 GB. The reader
// checks what JoinChunkTables and ValidateManifest check of the joined
// whole (manifest_tables.h, manifest_check.h), with the same errors: the
// tables against the root's sizes, checksums, files and counts; every
// tensor's dtype, shape and shard regions; every shard's chunks tiling its
// bytes in order; every chunk's length, place and encoding; no two chunks
// (objects' included) sharing a byte of a file. Counts, sizes and the
// columns' memory are checked against `limits` before anything is
// allocated for them.
//
// A format-1 manifest and a format-2 root (which lists every shard) are
// checked and joined as before and then put in columns.
//
// Thread-safety: a pure function.
#ifndef CKPT_DAEMON_PLANNING_COLUMN_MANIFEST_READ_H_
#define CKPT_DAEMON_PLANNING_COLUMN_MANIFEST_READ_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/column_manifest.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_footprint.h"
#include "daemon/planning/manifest_tables.h"

namespace ckpt::planning {

// `manifest`: MANIFEST's `manifest_bytes` bytes decoded with
// DecodeBoundedManifest, whose estimate is `footprint`; `job` and `step`
// those of the directory it was read from; `read_tables` reads TABLES.
// DATA_LOSS or FAILED_PRECONDITION naming `source` (and the table) as
// ValidateManifest and JoinChunkTables would.
absl::StatusOr<std::shared_ptr<const ColumnManifest>> ReadColumnManifest(
    v1::CheckpointManifest manifest, const ManifestFootprint& footprint, uint64_t manifest_bytes,
    absl::string_view job, int64_t step, absl::string_view source, const ManifestLimits& limits,
    const ChunkTablesReader& read_tables);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_COLUMN_MANIFEST_READ_H_
