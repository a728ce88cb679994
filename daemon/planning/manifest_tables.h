// Split manifests (docs/manifest.md): a root MANIFEST (format 2) with the
// tensors, their shards' regions and the objects, and one chunk table per
// data file listing that file's tensor chunks in columns, each with its own
// CRC32C trailer. The tables lie back to back in one file, TABLES, so a
// commit writes and fsyncs one file, not thousands, and a reader fetches
// only the byte ranges of the tables it needs. A checkpoint of millions of
// chunks is then no single message that every reader parses whole: each
// table is checked on its own, against the size, checksum and count its
// root entry gives.
//
// The root is written compact (format 3, compact_root.h): each shard
// layout listed once, each shard's table in a column. Format 2 roots,
// which list every shard, are still read.
//
// Readers join a split manifest back into the format-1 form that lists
// every chunk (JoinChunkTables), so everything after the read is the same
// for every format; ValidateManifest then checks the joined whole as it
// checks a format-1 manifest.
//
// Thread-safety: pure functions, safe from any thread; a ManifestSplitter
// is one caller's.
#ifndef CKPT_DAEMON_PLANNING_MANIFEST_TABLES_H_
#define CKPT_DAEMON_PLANNING_MANIFEST_TABLES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/arena.h>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/compact_root.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_footprint.h"

namespace ckpt::planning {

inline constexpr uint32_t kSplitManifestFormatVersion = 2;
// The step directory's file of chunk tables, beside MANIFEST. Table i+1
// lies at the sum of the sizes the root lists for tables 1 to i: no
// offset is stored, and none read from the root.
inline constexpr char kChunkTablesFile[] = "TABLES";

// How chunk table `index` (1-based) is named in messages.
std::string ChunkTableName(uint32_t index);

struct SplitManifestFiles {
  std::string root;                 // MANIFEST's bytes, trailer included
  std::vector<std::string> tables;  // table i+1's bytes; TABLES is them back to back
};

// `manifest` (format 1) split by data file, its root in `root_format` (3,
// or 2 as earlier versions wrote it; 2 also where a shard's region is
// unset, which a layout cannot say). nullopt when it cannot be: a
// shard whose chunks lie in more than one file (the root names one table
// per shard), no tensor chunk at all, or a split that JoinChunkTables
// would refuse under `limits` (its memory estimate is a little above
// format 1's). Callers write format 1 then.
std::optional<SplitManifestFiles> SplitManifest(const v1::CheckpointManifest& manifest,
                                                const ManifestLimits& limits,
                                                uint32_t root_format = 3);

// SplitManifest a tensor at a time, for a manifest split as it is made
// (a save's, at its commit): the whole message need not be in memory (at
// 131,072 ranks it is 6.5 GB; its split files a tenth of that). The same
// files as SplitManifest of the manifest whose tensors were added, in
// order, with Finish's header; nullopt where SplitManifest's would be,
// and where a shard's region is unset (SplitManifest then writes format
// 2). Add returns false once the manifest cannot be split.
class ManifestSplitter {
 public:
  explicit ManifestSplitter(uint32_t root_format = 3);
  ManifestSplitter(const ManifestSplitter&) = delete;
  ManifestSplitter& operator=(const ManifestSplitter&) = delete;
  ~ManifestSplitter();

  // The next tensor, its shards listing their chunks.
  bool Add(const v1::TensorEntry& tensor);
  // The files, with every field of `header` but its tensors. Once.
  std::optional<SplitManifestFiles> Finish(const v1::CheckpointManifest& header,
                                           const ManifestLimits& limits);

 private:
  const uint32_t format_;
  bool failed_ = false;
  // The root and the tables on an arena: a cluster's are millions of rows.
  std::unique_ptr<google::protobuf::Arena> arena_;
  v1::CheckpointManifest* root_;
  std::vector<v1::ChunkTable*> tables_;
  absl::flat_hash_map<std::string, uint32_t> table_of_file_;  // 1-based
  uint32_t shard_number_ = 0;                                 // over all tensors
  std::vector<ShardPlace> places_;                            // the tensor's being added
  CompactShards compact_;
};

// Reads `length` bytes at `offset` of TABLES, which must be `total` bytes
// long: NOT_FOUND when it is missing, DATA_LOSS when it has another size.
using ChunkTablesReader =
    std::function<absl::StatusOr<std::string>(uint64_t offset, uint64_t length, uint64_t total)>;

// Consecutive tables are read together, up to this many bytes at a time
// (a larger table alone): a few reads for a whole manifest, each bounded.
inline constexpr uint64_t kTablesReadBytes = uint64_t{32} << 20;

// Where each table of a split root lies in TABLES: table i+1 at
// offsets[i], its size offsets[i+1] - offsets[i]. The caller checked that
// the sizes' sum does not wrap.
std::vector<uint64_t> ChunkTableOffsets(const v1::CheckpointManifest& root);
// The runs of consecutive tables read together, [first, end): at most
// kTablesReadBytes each, or one larger table alone.
std::vector<std::pair<int, int>> ChunkTableRuns(const std::vector<uint64_t>& offsets);

// Joins the chunk tables of a format-2 or format-3 root (decoded with
// DecodeBoundedManifest from MANIFEST's `root_bytes` bytes, whose estimate
// is `root`) into it: format 1, every chunk
// listed. Before reading any table it checks the tables' counts and sizes
// against `limits` (--max_manifest_chunks, --max_manifest_bytes for the
// root and TABLES together, and --max_manifest_memory_bytes for the joined
// result and the reads) and every shard's table and chunk count against
// the root's table list. A table of another size, checksum, file or chunk
// count than its root entry, or listing a chunk of a shard that its root
// entry does not put there, is DATA_LOSS naming `source` and the table.
// A compact root is checked and expanded first (compact_root.h: its
// shards and their memory within the limits before one is added).
// A format-1 manifest is left as it is.
absl::Status JoinChunkTables(v1::CheckpointManifest& manifest, const ManifestFootprint& root,
                             uint64_t root_bytes, absl::string_view source,
                             const ManifestLimits& limits, const ChunkTablesReader& read_tables);

// FAILED_PRECONDITION: reading `source` (a manifest and its tables) would
// take about `bytes` of memory, past --max_manifest_memory_bytes.
absl::Status ManifestReadOverMemory(absl::string_view source, uint64_t bytes,
                                    const ManifestLimits& limits);

// Chunk table `index` (1-based) of the split root `root`, from its `bytes`
// as read, checked as every reader checks it: the very table the root
// lists (size and trailer CRC), its parse measured and, with
// memory_with(its parsed bytes) (what the reader will hold while it is
// parsed) within --max_manifest_memory_bytes, parsed, its columns as long
// as its chunk count, of the root's file and with the root's chunk count.
// DATA_LOSS or FAILED_PRECONDITION naming `source` and the table.
struct ListedChunkTable {
  v1::ChunkTable table;
  uint64_t parsed_bytes = 0;  // its estimated heap
  std::string where;          // "<source> (chunk table <index> of TABLES)", for errors
};
absl::StatusOr<ListedChunkTable> ReadListedChunkTable(
    const v1::CheckpointManifest& root, uint32_t index, absl::string_view bytes,
    absl::string_view source, const ManifestLimits& limits,
    absl::FunctionRef<uint64_t(uint64_t parsed_bytes)> memory_with);

// One table's bytes decoded and checked on their own (trailer, parse,
// column lengths), as JoinChunkTables does first: for the fuzzer and for
// tools that stream tables. DATA_LOSS naming `source` otherwise.
absl::StatusOr<v1::ChunkTable> DecodeChunkTable(absl::string_view bytes, absl::string_view source,
                                                const ManifestLimits& limits);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_MANIFEST_TABLES_H_
