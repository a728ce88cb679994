// Which local user owns each job. A job belongs to the uid that first
// attached a rank to it; only that uid (and operators, by permission) may
// attach to it, save it, load it, cancel it or read it.
//
// Ownership outlives the daemon: it is recorded in <root>/<job>/OWNER
// (written tmp -> fsync -> rename -> fsync dir, so a crash leaves the old
// record or the new one, never half of one), and read back on first use
// after a restart. Jobs saved before ownership existed have no record: the
// first user to attach claims them, and until then only operators see them.
//
// A claim is held in memory until the job's first save (Persist), and
// forgotten when the job's last rank goes with none made (Forget): an
// attach alone writes nothing to storage, so attaching many job names
// cannot fill the root with directories.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_AUTH_JOB_OWNERS_H_
#define CKPT_DAEMON_AUTH_JOB_OWNERS_H_

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/storage/backend.h"

namespace ckpt::auth {

inline constexpr char kOwnerFileName[] = "OWNER";

class JobOwners {
 public:
  JobOwners(storage::Backend& backend, std::string root)
      : backend_(backend), root_(std::move(root)) {}

  // The job's owner, or nullopt when it has none yet. An unreadable or
  // damaged record is an error (DATA_LOSS naming the file), never "no owner":
  // that would hand the job to whoever asks first.
  absl::StatusOr<std::optional<uid_t>> Owner(const std::string& job);
  // OK when `uid` owns the job, making it the owner (and recording that)
  // when the job has none; PERMISSION_DENIED naming the job and its owner
  // otherwise.
  absl::Status Claim(const std::string& job, uid_t uid);
  // Records a claim still held in memory (the job is about to save).
  absl::Status Persist(const std::string& job);
  // Drops a claim not recorded yet (the job's last rank is gone).
  void Forget(const std::string& job);

 private:
  absl::StatusOr<std::optional<uid_t>> ReadRecord(const std::string& job);
  absl::Status WriteRecord(const std::string& job, uid_t uid);

  storage::Backend& backend_;
  const std::string root_;
  absl::Mutex mu_;
  std::map<std::string, uid_t> owners_ ABSL_GUARDED_BY(mu_);   // recorded on storage
  std::map<std::string, uid_t> pending_ ABSL_GUARDED_BY(mu_);  // claimed, not recorded yet
};

// "uid 1001 (alice)", or "uid 1001" for an id with no account here.
std::string DescribeUid(uid_t uid);

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_JOB_OWNERS_H_
