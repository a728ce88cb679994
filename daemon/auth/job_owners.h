// Which principal (principal.h: a local uid or a token's name) owns each
// job. Only the owner may attach to it, save it or load it; operators act
// on others' jobs by permission (read, admin).
//
// Ownership is never first-come. A job nobody has saved yet is claimed by
// the first principal to attach it (held in memory, and recorded before
// its first save writes anything: Persist). A job that already has data on
// storage but no record (saved before ownership existed, or its OWNER was
// lost) is refused to every attach and load until an admin adopts it
// (Adopt; `ckptctl adopt JOB OWNER`).
//
// The record, <root>/<job>/OWNER ("uid 1001" or "principal ops"), is
// written tmp -> fsync -> rename-without-replace -> fsync dir: a crash
// leaves no record or a whole one, and of several hosts recording the
// owner of one job on a shared root at once, exactly one wins and the
// others read what it wrote.
//
// A claim not recorded yet is held by the ranks that made it: each
// successful Claim of it is one hold, each Release gives one back, and the
// claim is forgotten with the last (the job's last rank went with no save
// made): an attach alone writes nothing to storage, so attaching many job
// names cannot fill the root with directories. Counting holds, rather than
// asking whether any rank is still attached, keeps a rank that is between
// its Claim and its session from losing the job to another principal.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_AUTH_JOB_OWNERS_H_
#define CKPT_DAEMON_AUTH_JOB_OWNERS_H_

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/auth/principal.h"
#include "daemon/storage/backend.h"

namespace ckpt::auth {

inline constexpr char kOwnerFileName[] = "OWNER";

class JobOwners {
 public:
  // Whether `job` holds anything on any tier (checkpoints, partial steps):
  // a job with data and no record is not for the first comer.
  using HasData = std::function<absl::StatusOr<bool>(const std::string& job)>;

  JobOwners(storage::Backend& backend, std::string root, HasData has_data = nullptr)
      : backend_(backend), root_(std::move(root)), has_data_(std::move(has_data)) {}

  // The job's owner, or nullopt when it has none yet. An unreadable or
  // damaged record is an error (DATA_LOSS naming the file), never "no owner":
  // that would hand the job to whoever asks first.
  absl::StatusOr<std::optional<Principal>> Owner(const std::string& job);
  // OK when `who` owns the job, or the job is new (no record, no data) and
  // `who` becomes its owner; PERMISSION_DENIED naming the job and its owner
  // otherwise, or saying that an admin must adopt a job with data and no
  // owner. Each OK is a hold on a claim not recorded yet: Release it.
  absl::Status Claim(const std::string& job, const Principal& who);
  // Records the claim of `who` still held in memory (the job is about to
  // save). PERMISSION_DENIED when the job is another's, or another host
  // recorded another owner first.
  absl::Status Persist(const std::string& job, const Principal& who);
  // Gives back one hold of Claim (a rank gone, or an attach refused after
  // its claim); the last drops a claim not recorded yet.
  void Release(const std::string& job);
  // An admin gives the job to `who` and records it at once. Without
  // `replace`, FAILED_PRECONDITION when it has an owner already (named).
  // Returns the previous owner, if any.
  absl::StatusOr<std::optional<Principal>> Adopt(const std::string& job, const Principal& who,
                                                 bool replace);

 private:
  absl::StatusOr<std::optional<Principal>> ReadRecord(const std::string& job);
  // ALREADY_EXISTS when a record exists and `replace` is false.
  absl::Status WriteRecord(const std::string& job, const Principal& who, bool replace);

  storage::Backend& backend_;
  const std::string root_;
  const HasData has_data_;
  absl::Mutex mu_;
  std::map<std::string, Principal> owners_ ABSL_GUARDED_BY(mu_);  // recorded on storage
  struct Pending {
    Principal who;
    int holds = 0;
  };
  std::map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);  // claimed, not recorded yet
};

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_JOB_OWNERS_H_
