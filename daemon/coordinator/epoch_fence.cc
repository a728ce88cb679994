#include "daemon/coordinator/epoch_fence.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/storage/layout.h"

namespace ckpt::coordinator {
namespace {

constexpr char kFencedPayload[] = "ckpt.dev/commit-fenced";

absl::Status Fenced(std::string message) {
  absl::Status s = absl::FailedPreconditionError(std::move(message));
  s.SetPayload(kFencedPayload, absl::Cord("1"));
  return s;
}

}  // namespace

bool IsFencedCommit(const absl::Status& status) {
  return status.GetPayload(kFencedPayload).has_value();
}

absl::StatusOr<int64_t> ReadJobEpoch(storage::Backend& backend, const std::string& job_dir) {
  const std::string path = absl::StrCat(job_dir, "/", storage::kEpochName);
  absl::StatusOr<std::string> held =
      storage::ReadWholeFile(backend, path, storage::kMaxLatestBytes);
  if (absl::IsNotFound(held.status())) return 0;
  if (!held.ok()) return held.status();
  std::optional<int64_t> epoch = storage::ParseLatestContents(*held);
  if (!epoch.has_value()) {
    // Written whole (replaced, never torn): damage, which must not open
    // the fence to every epoch.
    return absl::DataLossError(absl::StrCat(path, " holds no epoch; a commit cannot be fenced"));
  }
  return *epoch;
}

absl::StatusOr<std::unique_ptr<EpochFence>> EnterEpochFence(storage::Backend& backend,
                                                            const std::string& job_dir,
                                                            int64_t epoch,
                                                            const StillLeading& still_leading,
                                                            const FenceOptions& options) {
  const std::string lock_path = absl::StrCat(job_dir, "/", storage::kFenceLockName);
  // Created once, never replaced or removed: every coordinator locks the
  // same file.
  absl::StatusOr<bool> exists = backend.Exists(lock_path);
  if (!exists.ok()) return exists.status();
  if (!*exists) {
    if (absl::Status s = backend.CreateFileExclusive(lock_path, "");
        !s.ok() && !absl::IsAlreadyExists(s)) {
      return s;
    }
  }
  std::unique_ptr<EpochFence> fence(new EpochFence);
  const absl::Time until = absl::Now() + options.lock_wait;
  absl::Duration pause = absl::Milliseconds(5);
  while (true) {
    absl::StatusOr<std::unique_ptr<storage::FileLock>> lock =
        backend.LockFile(lock_path, storage::LockMode::kExclusive, /*wait=*/false);
    if (lock.ok()) {
      fence->lock_ = std::move(*lock);
      break;
    }
    if (!absl::IsUnavailable(lock.status())) return lock.status();
    if (absl::Now() > until) {
      return absl::UnavailableError(
          absl::StrCat("the commit fence ", lock_path, " stayed locked for ",
                       absl::FormatDuration(options.lock_wait), " (another coordinator's commit)"));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(200));
  }
  absl::StatusOr<int64_t> stored = ReadJobEpoch(backend, job_dir);
  if (!stored.ok()) return stored.status();
  fence->stored_before_ = *stored;
  if (*stored > epoch) {
    return Fenced(absl::StrCat("commit fenced: leader epoch ", *stored,
                               " has committed to this job since this coordinator's epoch ", epoch,
                               " began (it was deposed)"));
  }
  // Before EPOCH advances: a term that is over must not raise the bar.
  if (still_leading) {
    if (absl::Status s = still_leading(); !s.ok()) {
      return Fenced(absl::StrCat("commit fenced: ", s.message()));
    }
  }
  if (*stored < epoch) {
    if (absl::Status s = storage::WriteFileAtomically(
            backend, absl::StrCat(job_dir, "/", storage::kEpochName), absl::StrCat(epoch, "\n"));
        !s.ok()) {
      return s;
    }
  }
  return fence;
}

}  // namespace ckpt::coordinator
