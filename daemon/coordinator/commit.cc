#include "daemon/coordinator/commit.h"

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/fault_points.h"
#include "daemon/coordinator/layout.h"
#include "daemon/coordinator/manifest_io.h"
#include "proto/lib/status_context.h"

namespace ckpt::coordinator {
namespace {

absl::Status WithContext(const absl::Status& s, const std::string& what) {
  return Prefixed(s, absl::StrCat(what, ": "));
}

}  // namespace

absl::Status CommitCheckpoint(storage::Backend& backend, const std::string& root,
                              const std::string& partial_dir,
                              const v1::CheckpointManifest& manifest) {
  const std::string job_dir = JobDir(root, manifest.job());
  const std::string step_dir = StepDir(root, manifest.job(), manifest.step());
  const std::string what = absl::StrCat("commit of ", manifest.job(), " step ", manifest.step());

  const std::string encoded = EncodeManifest(manifest);
  {
    absl::StatusOr<std::unique_ptr<storage::WritableFile>> file =
        backend.NewWritableFile(absl::StrCat(partial_dir, "/", kManifestName));
    if (!file.ok()) return WithContext(file.status(), what);
    if (absl::Status s = (*file)->WriteAt(0, encoded.data(), encoded.size()); !s.ok()) {
      return WithContext(s, what);
    }
    if (absl::Status s = (*file)->Sync(); !s.ok()) return WithContext(s, what);
    if (absl::Status s = (*file)->Close(); !s.ok()) return WithContext(s, what);
  }
  if (absl::Status s = backend.SyncDir(partial_dir); !s.ok()) return WithContext(s, what);
  FaultPoint("commit.before_rename");

  absl::StatusOr<bool> exists = backend.Exists(step_dir);
  if (!exists.ok()) return WithContext(exists.status(), what);
  if (*exists) return absl::AlreadyExistsError(absl::StrCat(what, ": ", step_dir, " exists"));
  if (absl::Status s = backend.Rename(partial_dir, step_dir); !s.ok()) return WithContext(s, what);
  if (absl::Status s = backend.SyncDir(job_dir); !s.ok()) {
    // Not committed, so not visible either: the caller aborts this save and
    // must not find it later as the newest step (nor be refused a retry).
    (void)backend.Rename(step_dir, partial_dir);
    return WithContext(s, what);
  }
  FaultPoint("commit.after_rename");

  return WithContext(storage::WriteFileAtomically(backend, absl::StrCat(job_dir, "/", kLatestName),
                                                  absl::StrCat(manifest.step(), "\n")),
                     what);
}

}  // namespace ckpt::coordinator
