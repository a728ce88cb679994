// What reading a MANIFEST would cost in memory, found before it is parsed.
// A MANIFEST is untrusted input (manifest_check.h), and its parsed form is
// many times its size on disk: an empty chunk is 2 bytes in the file and
// a heap object of some 60 bytes, a pointer to it and, while the manifest
// is checked, an extent of 48. A 20 MB file of 10^7 chunks, well inside
// --max_manifest_bytes, took 2.5 GiB to read. MeasureManifest walks the
// wire format along the schema without building anything and estimates
// the parsed message's heap from each message's size (its generated
// class), each string's and each repeated field's; the reader refuses a
// manifest whose estimate is past --max_manifest_memory_bytes before
// parsing it.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef CKPT_DAEMON_PLANNING_MANIFEST_FOOTPRINT_H_
#define CKPT_DAEMON_PLANNING_MANIFEST_FOOTPRINT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/common.pb.h"
#include "daemon/planning/manifest_check.h"

namespace ckpt::planning {

// No byte of a manifest costs more than this to read (ReadBytes): an empty
// chunk, 2 bytes, costs about 200.
inline constexpr uint64_t kMaxFootprintPerWireByte = 256;

struct ManifestFootprint {
  uint64_t parsed_bytes = 0;  // heap of the parsed CheckpointManifest, estimated
  // As ValidateManifest counts them: tensors, their shards, the shards'
  // chunks plus one per object.
  int64_t tensors = 0;
  int64_t shards = 0;
  int64_t chunks = 0;
  int64_t objects = 0;

  // Reading a manifest of `file_bytes`: the file's bytes, the parsed
  // message and what ValidateManifest builds (an extent per chunk, a set
  // entry per tensor and object).
  uint64_t ReadBytes(uint64_t file_bytes) const;
};

// `payload` is the serialized CheckpointManifest (without the CRC trailer).
// DATA_LOSS "<source>: manifest does not parse" where the wire format is
// broken (the parser would fail too).
absl::StatusOr<ManifestFootprint> MeasureManifest(absl::string_view payload,
                                                  absl::string_view source);

// The same walk over a split manifest's chunk table (manifest_tables.h):
// parsed_bytes is the parsed ChunkTable's heap; the counts stay 0 (the
// delta bases it holds are counted as chunks by nobody: the table's own
// chunk count bounds them).
absl::StatusOr<ManifestFootprint> MeasureChunkTable(absl::string_view payload,
                                                    absl::string_view source);

// What one chunk joined from a chunk table into a manifest costs: its
// message, its slot, its copy of the file name and ValidateManifest's
// extent.
uint64_t JoinedChunkBytes(size_t file_name_bytes);

// What one shard expanded from a compact root (compact_root.h) costs: its
// message, its slot and a copy of `region`, counted from the region's
// fields (not from its buffers' capacity), so that the writer and every
// reader agree.
uint64_t ExpandedShardBytes(const v1::Region& region);

// Sums and products that stop at UINT64_MAX: estimates of hostile sizes
// cannot wrap.
inline uint64_t SatAdd(uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? UINT64_MAX : sum;
}
inline uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
}

// FAILED_PRECONDITION naming `source` and the flag when the manifest holds
// more tensors, shards, chunks or objects than the limits, or reading it
// (ReadBytes) would take more than limits.max_memory_bytes.
absl::Status CheckManifestFootprint(const ManifestFootprint& footprint, uint64_t file_bytes,
                                    absl::string_view source, const ManifestLimits& limits);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_MANIFEST_FOOTPRINT_H_
