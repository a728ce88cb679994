// The partial directory a save or a copy fills before its commit renames it
// (commit.h): made with its data/ folder, and, for an erasure-coded save of
// the memory tier, the stripes written beside its MANIFEST.
//
// Thread-safety: free functions; the caller owns the directory.
#ifndef CKPT_DAEMON_COORDINATOR_PARTIAL_DIR_H_
#define CKPT_DAEMON_COORDINATOR_PARTIAL_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

// The step's stripes (ErasurePlan, serialized), beside its MANIFEST.
inline constexpr char kErasureFile[] = "ERASURE";

// Creates `partial` and its data/ folder under `root`. A new job directory
// must survive a crash with the steps committed in it: when `job` had none,
// the root is fsynced before anything is renamed into it.
absl::Status CreatePartialDir(storage::Backend& backend, const std::string& root,
                              const std::string& job, const std::string& partial);

// The stripes of an erasure-coded save (`whole`), written and fsynced into
// its partial directory as kErasureFile.
absl::Status WriteErasureLayout(storage::Backend& backend, const std::string& partial,
                                const v1::ErasurePlan& whole);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_PARTIAL_DIR_H_
