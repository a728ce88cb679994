// The manifest a save commits, made from its plan and its hosts' reports.
//
// The plan keeps the manifest as a template (planning/planned_manifest.h);
// the hosts report each chunk's checksum, and its encoding where the
// writers compressed it. A manifest written split (ManifestWriting) is
// split as it is made, a tensor at a time: at 131,072 ranks the whole
// message was 6.5 GB on the coordinator, its split files a tenth of that.
// The whole manifest is made where it must be: a chunk encoded (the
// commit checks the larger manifest against what loading accepts, which
// needs its bytes), one too small to split, or the memory tier's commit,
// which sends the whole back to the hosts.
//
// Thread-safety: a pure function.
#ifndef CKPT_DAEMON_COORDINATOR_SAVED_MANIFEST_H_
#define CKPT_DAEMON_COORDINATOR_SAVED_MANIFEST_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/coordinator/commit.h"
#include "daemon/planning/plan_cache.h"

namespace ckpt::coordinator {

// The files a commit of `plan` writes, each chunk's checksum and encoding
// filled in from `reports` (by host). With `joined_out`, also the whole
// manifest serialized. INTERNAL naming the chunk when a checksum is
// missing; INVALID_ARGUMENT for deltas against more than one step or in a
// save of several hosts; RESOURCE_EXHAUSTED when the encoded manifest is
// past what loading accepts (writing.limits).
absl::StatusOr<ManifestFiles> SavedManifest(
    const planning::SavePlan& plan, int64_t created_unix_ms,
    const std::map<std::string, v1::NodePersistReport>& reports, const ManifestWriting& writing,
    std::string* joined_out = nullptr);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_SAVED_MANIFEST_H_
