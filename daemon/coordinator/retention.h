// Garbage collection of a job's checkpoints: `ckptctl gc` (through the
// daemon) and the daemon's retention after each commit (retention_runner.h).
// retention_policy.h decides what is kept; this gathers the facts and
// deletes.
//
// Pins. A checkpoint being read must not vanish under its reader, and
// readers live in several processes (this daemon's loads, `ckptctl export`
// reading the storage root directly, another daemon on a shared root). So a
// reader pins a step with a shared lock on its MANIFEST (Backend::LockFile:
// flock(2) on POSIX, which works across processes and between two opens of
// one process), taken before it reads the manifest and held until it is
// done. gc tries an exclusive lock without waiting and keeps any step it
// cannot lock; it holds the locks of the steps it deletes until their
// renames are durable. A reader that resolved the step before the rename
// waits on its lock, then finds the path gone (NOT_FOUND), never half a
// checkpoint. The MANIFEST is locked, not a file of our own, because a
// committed step directory is never modified (docs/design.md §6). A step with no
// MANIFEST cannot be read by anyone, so needs no pin.
//
// Deletion protocol, per step, so that a crash anywhere leaves no listed
// half-checkpoint:
//  1. rename step-N to .step-N.trash-<host>-<instance>-<seq> (layout.h): the
//     catalog lists only step-N, so the step disappears whole, atomically;
//  2. fsync the job directory: the rename is durable before any file goes
//     (without it a crash could bring step-N back with files missing);
//  3. remove the trash tree. A crash during 3 (or between 2 and 3) leaves
//     only trash, which the next gc of the job, or the daemon's start-up
//     (Catalog::RemoveStalePartials), removes.
// Fault points gc.after_rename (after 2) and gc.mid_remove (after the first
// file of 3) let tests kill the daemon there.
//
// Thread-safety: safe from any thread; collections run one at a time.
#ifndef CKPT_DAEMON_COORDINATOR_RETENTION_H_
#define CKPT_DAEMON_COORDINATOR_RETENTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/planning/retention_policy.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

// Pins a committed step for reading (above): waits while a gc holds it.
// NOT_FOUND when the step has no MANIFEST or was deleted meanwhile.
absl::StatusOr<std::unique_ptr<storage::FileLock>> PinStep(storage::Backend& backend,
                                                           const std::string& root,
                                                           const std::string& job, int64_t step);

struct GcStep {
  enum class Outcome { kKept, kDeleted, kFailed };
  int64_t step = 0;
  Outcome outcome = Outcome::kKept;
  std::string reason;
  // Deleted: the bytes of its files (freed, or in a dry run to be freed).
  // Kept: the checkpoint's bytes when its manifest is readable.
  uint64_t bytes = 0;
};

struct GcResult {
  std::vector<GcStep> steps;  // ascending
  uint64_t bytes_freed = 0;   // dry run: what would be freed
  bool failed() const;
};

class GarbageCollector {
 public:
  GarbageCollector(storage::Backend& backend, Catalog& catalog);

  // Applies the policy to the job's steps. dry_run decides and measures but
  // deletes nothing. `trigger` says who asked, for the one line logged per
  // run ("ckptctl gc", "retention"). NOT_FOUND for a job with no directory;
  // a failure to delete one step is reported in its GcStep (kFailed), not
  // as an error of the whole run.
  absl::StatusOr<GcResult> Collect(const std::string& job, const planning::RetentionPolicy& policy,
                                   bool dry_run, absl::Time now, absl::string_view trigger);

 private:
  // Removes trash this host's daemons left in the job directory (a gc that
  // failed or died mid-removal). Logs, never fails the run.
  void RemoveLeftoverTrash(const std::string& job);

  storage::Backend& backend_;
  Catalog& catalog_;
  absl::Mutex mu_;  // held for a whole collection
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_RETENTION_H_
