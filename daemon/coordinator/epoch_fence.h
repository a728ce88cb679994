// Commits fenced by the leader's epoch (docs/failover.md). With several
// coordinators, a deposed leader that was only paused (GC stall, SIGSTOP,
// a partition that healed) may try to commit after a newer leader has:
// its memory says it leads, so the check must be made where the commit
// lands. Each job keeps the highest epoch that committed to it in
// <job>/EPOCH; a commit takes the job's fence lock (<job>/EPOCH.lock,
// exclusive, across processes and hosts: flock(2) on a filesystem, lease
// objects on an object store), reads EPOCH, refuses when it is above its
// own epoch, advances it when below, asks the caller whether it still
// leads, and commits while it holds the lock. A newer leader's commit of
// the job thus either comes after the stale one's (and then the stale one
// is the last commit made under its epoch) or advances EPOCH first (and
// the stale one is refused).
//
// Epoch 0 is "no election" (one coordinator): no fence, nothing written.
#ifndef CKPT_DAEMON_COORDINATOR_EPOCH_FENCE_H_
#define CKPT_DAEMON_COORDINATOR_EPOCH_FENCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

// Whether the caller still leads: OK, or why not (it is not asked to
// commit then).
using StillLeading = std::function<absl::Status()>;

struct FenceOptions {
  // How long to wait for another coordinator's commit of the job to end.
  absl::Duration lock_wait = absl::Seconds(30);
};

// Held while the commit runs; the lock goes with it.
class EpochFence {
 public:
  ~EpochFence() = default;
  int64_t stored_before() const { return stored_before_; }

 private:
  friend absl::StatusOr<std::unique_ptr<EpochFence>> EnterEpochFence(storage::Backend&,
                                                                     const std::string&, int64_t,
                                                                     const StillLeading&,
                                                                     const FenceOptions&);
  std::unique_ptr<storage::FileLock> lock_;
  int64_t stored_before_ = 0;
};

// Enters the fence of the job at `job_dir` for a commit under `epoch`
// (> 0). FAILED_PRECONDITION with kFencedPayload when a newer epoch has
// committed to the job, or when still_leading says this coordinator no
// longer leads; UNAVAILABLE when the lock stays taken past lock_wait.
absl::StatusOr<std::unique_ptr<EpochFence>> EnterEpochFence(storage::Backend& backend,
                                                            const std::string& job_dir,
                                                            int64_t epoch,
                                                            const StillLeading& still_leading,
                                                            const FenceOptions& options = {});

// Whether a commit error is the fence's refusal (counted as a fenced commit).
bool IsFencedCommit(const absl::Status& status);

// The epoch in <job>/EPOCH; 0 when there is none.
absl::StatusOr<int64_t> ReadJobEpoch(storage::Backend& backend, const std::string& job_dir);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_EPOCH_FENCE_H_
