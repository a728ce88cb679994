// `ckptctl verify`: re-reads every chunk of a checkpoint and checks its
// CRC32C. The directory read is the one asked for (root/job/step-N), never
// one named inside the manifest, and the manifest is validated first
// (Catalog::ReadManifest). Chunks are read in pieces of at most
// `piece_bytes` into one buffer, so a chunk of any length costs no more
// memory than that, and a mismatch names the file, the offset and the
// expected CRC but never the CRC of the bytes found.
//
// Thread-safety: safe from any thread; each call has its own buffer.
#ifndef CKPT_DAEMON_COORDINATOR_VERIFY_H_
#define CKPT_DAEMON_COORDINATOR_VERIFY_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

struct VerifyResult {
  int64_t step = 0;  // the step verified (latest resolved)
  uint64_t chunks = 0;
  uint64_t bytes = 0;
};

inline constexpr size_t kVerifyPieceBytes = size_t{4} << 20;

// step -1: latest. DATA_LOSS naming file, offset and tensor or object on the
// first chunk that does not verify; the catalog's errors for a broken step.
absl::StatusOr<VerifyResult> VerifyCheckpoint(storage::Backend& backend, Catalog& catalog,
                                              const std::string& job, int64_t step,
                                              size_t piece_bytes = kVerifyPieceBytes);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_VERIFY_H_
