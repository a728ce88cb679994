// What is committed under a storage root: steps per job, their manifests,
// and start-up clean-up of partial directories left by a crash.
//
// Thread-safety: safe from any thread (it holds no state of its own; the
// directory tree is the truth).
#ifndef CKPT_DAEMON_COORDINATOR_CATALOG_H_
#define CKPT_DAEMON_COORDINATOR_CATALOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

class Catalog {
 public:
  Catalog(storage::Backend& backend, std::string root);

  const std::string& root() const { return root_; }

  // Removes every <job>/.step-N.partial-* directory; returns how many.
  absl::StatusOr<int> RemoveStalePartials();
  // Committed steps of a job, ascending; empty when the job has none.
  absl::StatusOr<std::vector<int64_t>> ListSteps(const std::string& job);
  // step >= 0 is checked to exist; -1 means the newest committed step.
  // NOT_FOUND naming the job and step otherwise.
  absl::StatusOr<int64_t> ResolveStep(const std::string& job, int64_t step);
  absl::StatusOr<bool> StepExists(const std::string& job, int64_t step);
  absl::StatusOr<v1::CheckpointManifest> ReadManifest(const std::string& job, int64_t step);

 private:
  storage::Backend& backend_;
  const std::string root_;
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_CATALOG_H_
