#include "daemon/coordinator/partial_dir.h"

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "daemon/storage/layout.h"

namespace ckpt::coordinator {

absl::Status CreatePartialDir(storage::Backend& backend, const std::string& root,
                              const std::string& job, const std::string& partial) {
  absl::StatusOr<bool> job_exists = backend.Exists(storage::JobDir(root, job));
  if (!job_exists.ok()) return job_exists.status();
  if (absl::Status s = backend.CreateDirs(absl::StrCat(partial, "/data")); !s.ok()) return s;
  if (!*job_exists) return backend.SyncDir(root);
  return absl::OkStatus();
}

absl::Status WriteErasureLayout(storage::Backend& backend, const std::string& partial,
                                const v1::ErasurePlan& whole) {
  const std::string bytes = whole.SerializeAsString();
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> file =
      backend.NewWritableFile(absl::StrCat(partial, "/", kErasureFile));
  if (!file.ok()) return file.status();
  absl::Status status = (*file)->WriteAt(0, bytes.data(), bytes.size());
  if (status.ok()) status = (*file)->Sync();
  absl::Status closed = (*file)->Close();
  return status.ok() ? closed : status;
}

}  // namespace ckpt::coordinator
