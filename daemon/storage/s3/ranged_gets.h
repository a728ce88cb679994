// Reads of one batch as few ranged GETs as sensible. An object store
// charges per request, and a server's cost per request (authorisation,
// lookups, a new file open) is paid again for every small GET: reads that
// lie close together in the object go as one GET, its body scattered over
// their buffers, and a long read is cut into GETs that run in parallel.
#ifndef CKPT_DAEMON_STORAGE_S3_RANGED_GETS_H_
#define CKPT_DAEMON_STORAGE_S3_RANGED_GETS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "daemon/storage/backend.h"
#include "daemon/storage/s3/http.h"

namespace ckpt::storage::s3 {

struct RangedGet {
  uint64_t offset = 0;
  // Where the bytes from offset on go, in order; a null piece is a gap
  // read and dropped.
  std::vector<SinkPiece> pieces;
};

// The GETs that read every op, each at most max_bytes long; reads at most
// max_gap apart join (never overlapping ones: each byte has one place).
// Empty ops need no GET.
std::vector<RangedGet> PlanRangedGets(absl::Span<const IoOp> ops, size_t max_bytes, size_t max_gap);

}  // namespace ckpt::storage::s3

#endif  // CKPT_DAEMON_STORAGE_S3_RANGED_GETS_H_
