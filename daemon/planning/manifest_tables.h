// Split manifests (docs/manifest.md): a root MANIFEST (format 2) with the
// tensors, their shards' regions and the objects, and one chunk table per
// data file (tables/1 ... tables/N) listing that file's tensor chunks in
// columns, each file with its own CRC32C trailer. A checkpoint of millions
// of chunks is then no single file that every reader parses whole: each
// table is checked on its own, against the size, checksum and count its
// root entry gives.
//
// Readers join a split manifest back into the format-1 form that lists
// every chunk (JoinChunkTables), so everything after the read is the same
// for both formats; ValidateManifest then checks the joined whole as it
// checks a format-1 manifest.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef CKPT_DAEMON_PLANNING_MANIFEST_TABLES_H_
#define CKPT_DAEMON_PLANNING_MANIFEST_TABLES_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/manifest_check.h"

namespace ckpt::planning {

inline constexpr uint32_t kSplitManifestFormatVersion = 2;
// The step directory's folder of chunk tables.
inline constexpr char kChunkTablesDir[] = "tables";

// The name of chunk table `index` (1-based) in the step directory. Readers
// derive it from the index; no name is read from the root.
std::string ChunkTableName(uint32_t index);

struct SplitManifestFiles {
  std::string root;                 // MANIFEST's bytes, trailer included
  std::vector<std::string> tables;  // tables[i] is ChunkTableName(i + 1)'s bytes
};

// `manifest` (format 1) split by data file. nullopt when it cannot be: a
// shard whose chunks lie in more than one file (the root names one table
// per shard), or no tensor chunk at all. Callers write format 1 then.
std::optional<SplitManifestFiles> SplitManifest(const v1::CheckpointManifest& manifest);

// Reads chunk table `name` of exactly `bytes` bytes: NOT_FOUND or DATA_LOSS
// when it is missing or of another size.
using ChunkTableReader =
    std::function<absl::StatusOr<std::string>(const std::string& name, uint64_t bytes)>;

// Joins the chunk tables of a format-2 root (decoded with
// DecodeBoundedManifest, `root_bytes` long) into it: format 1, every chunk
// listed. Before reading any table it checks the tables' counts and sizes
// against `limits` (--max_manifest_chunks, --max_manifest_bytes for all
// the manifest's files together, and --max_manifest_memory_bytes for the
// joined result) and every shard's table and chunk count against the
// root's table list. A table of another size, checksum, file or chunk
// count than its root entry, or listing a chunk of a shard that its root
// entry does not put there, is DATA_LOSS naming `source` and the table.
// A format-1 manifest is left as it is.
absl::Status JoinChunkTables(v1::CheckpointManifest& manifest, uint64_t root_bytes,
                             absl::string_view source, const ManifestLimits& limits,
                             const ChunkTableReader& read_table);

// One table's bytes decoded and checked on their own (trailer, parse,
// column lengths), as JoinChunkTables does first: for the fuzzer and for
// tools that stream tables. DATA_LOSS naming `source` otherwise.
absl::StatusOr<v1::ChunkTable> DecodeChunkTable(absl::string_view bytes, absl::string_view source,
                                                const ManifestLimits& limits);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_MANIFEST_TABLES_H_
