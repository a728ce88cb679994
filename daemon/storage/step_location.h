// Where a committed step's files are (docs/design.md §6b).
//
// On a filesystem the commit renames the partial directory to step-<N>, so
// the step's files are in step-<N>/. An object store cannot rename: the
// files stay where they were written (<job>/.step-<N>.partial-<id>/) and the
// commit writes one small object, <job>/step-<N>/COMMIT, naming that
// directory and the manifest's size and CRC32C. A step without COMMIT does
// not exist (step-<N>/ holds nothing else, so listing and existence follow),
// and every reader of a committed step finds its files through here, with
// GETs only: finding a checkpoint never depends on a LIST.
#ifndef CKPT_DAEMON_STORAGE_STEP_LOCATION_H_
#define CKPT_DAEMON_STORAGE_STEP_LOCATION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/storage/backend.h"

namespace ckpt::storage {

inline constexpr char kCommitName[] = "COMMIT";
// A commit object is a few lines; anything larger is not one of ours.
inline constexpr uint64_t kMaxCommitBytes = 4096;

struct CommitRecord {
  std::string dir;  // ".step-<N>.partial-<id>": where the files are, in the job
  uint64_t manifest_bytes = 0;
  uint32_t manifest_crc32c = 0;
};

// "ckpt-commit 1\ndir <dir>\nmanifest_bytes <n>\nmanifest_crc32c <hex>\n".
std::string EncodeCommitRecord(const CommitRecord& record);
// Nullopt unless contents are exactly what EncodeCommitRecord writes, for a
// partial directory of `step` (so a crafted COMMIT cannot point elsewhere).
std::optional<CommitRecord> ParseCommitRecord(absl::string_view contents, int64_t step);

// The path of step-<N>/COMMIT.
std::string CommitPath(absl::string_view root, absl::string_view job, int64_t step);

// The directory holding a committed step's MANIFEST and data: step-<N> on a
// filesystem; on an object store the one its COMMIT names (NOT_FOUND without
// a COMMIT, DATA_LOSS for one that is not a commit record).
absl::StatusOr<std::string> ResolveStepDir(Backend& backend, absl::string_view root,
                                           absl::string_view job, int64_t step);

// The same, with the commit record where there is one.
struct ResolvedStep {
  std::string dir;
  std::optional<CommitRecord> commit;  // object stores
};
absl::StatusOr<ResolvedStep> ResolveStep(Backend& backend, absl::string_view root,
                                         absl::string_view job, int64_t step);
// DATA_LOSS, naming the manifest, unless its bytes are the ones the COMMIT
// recorded (a MANIFEST replaced after its commit); OK without a COMMIT.
absl::Status CheckCommittedManifest(const ResolvedStep& step, absl::string_view manifest_bytes,
                                    absl::string_view manifest_path);

// Whether step N is committed: its directory (filesystem) or its COMMIT
// (object store, one HEAD) exists.
absl::StatusOr<bool> StepCommitted(Backend& backend, absl::string_view root, absl::string_view job,
                                   int64_t step);

// The file loads and exports lock to pin a step, and gc to delete it
// (coordinator/retention.h): its MANIFEST, or on an object store its COMMIT.
std::string StepPinPath(const Backend& backend, absl::string_view root, absl::string_view job,
                        int64_t step);

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_STEP_LOCATION_H_
