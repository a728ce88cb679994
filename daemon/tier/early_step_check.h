// A trainer that restarts attaches to ckptd well before it loads (it
// builds its model, its optimizer, its data loader first). When a rank
// attaches and this host's memory tier holds steps of its job, the newest
// of them is checked then (held_step_check.h), in the background, so that
// the restore finds its bytes verified instead of reading each twice on
// its critical path (once to verify, once to copy).
//
// A job spread over hosts: the load's plan takes the early check (waiting
// for it if it still runs) when it is of the step the load wants, no step
// was committed here since it began (MemoryTier::Generation), every file
// the host holds of that step passed it, and it ended at most `fresh_for`
// ago; else the load checks anew, as before. Such a check is used once.
//
// A job on one host: the check sets nothing aside; the load of the step it
// checked takes the files that passed (waiting for it if it still runs),
// for as long as `trusted_for` after it ended, and may take them again.
//
// Either way a file verified early is read again only if it changed since
// (its stamp, file_stamp.h); every other chunk is verified where it lies
// as the ranks copy it, and every host verifies what peers send it.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_TIER_EARLY_STEP_CHECK_H_
#define CKPT_DAEMON_TIER_EARLY_STEP_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/exec/background_tasks.h"
#include "daemon/tier/held_step_check.h"
#include "daemon/tier/memory_tier.h"

namespace ckpt::tier {

class EarlyStepChecks {
 public:
  static constexpr absl::Duration kFreshFor = absl::Seconds(30);
  // A large model takes minutes to build before it loads.
  static constexpr absl::Duration kTrustedFor = absl::Minutes(10);
  static constexpr size_t kMaxJobs = 1024;  // remembered as begun

  EarlyStepChecks(tier::MemoryTier& tier, int threads, absl::Duration fresh_for = kFreshFor,
                  absl::Duration trusted_for = kTrustedFor)
      : tier_(tier), threads_(threads), fresh_for_(fresh_for), trusted_for_(trusted_for) {}
  EarlyStepChecks(const EarlyStepChecks&) = delete;
  EarlyStepChecks& operator=(const EarlyStepChecks&) = delete;

  // Starts checking `job`'s newest held step on `background` (which must
  // be drained before this object goes), unless the tier holds none of the
  // job's steps, files are being committed, a check runs (one at a time),
  // one of the job's newest step began under the tier's present generation
  // already, or Stop was called. `spread`: the job spans hosts.
  void Begin(const std::string& job, bool spread, exec::BackgroundTasks& background)
      ABSL_LOCKS_EXCLUDED(mu_);
  // For a load spread over hosts of step `wanted` (-1: the newest): fills
  // `held` with what this host offers (MemoryTier::HeldSteps, bad files
  // left out) and returns the check of it, early or made now.
  HeldStepCheck CheckForLoad(const std::string& job, int64_t wanted, HeldSteps& held)
      ABSL_LOCKS_EXCLUDED(mu_);
  // For a load on one host of `job`'s `step`: the files an early check of
  // it verified, as they were (empty: none). Waits for a check of the job
  // that runs now.
  std::map<std::string, FileStamp> VerifiedFiles(const std::string& job, int64_t step)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A load on one host planned with what VerifiedFiles gave it.
  void CountUsed() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++used_;
  }
  // No check begins after this (shutdown: before `background` drains).
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t early_checks_used() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return used_;
  }

 private:
  // What a check was begun under. One of the same newest step (and for a
  // job spread over hosts, the same generation) begins none: a client
  // attaching over and over, however it says it is laid out, costs no more
  // checks than its commits do.
  struct Begun {
    uint64_t generation = 0;  // the tier's; 0 for a job on one host (stamps guard it)
    int64_t newest = -1;      // the job's newest held step
    bool spread = false;
    bool Same(const Begun& o) const { return generation == o.generation && newest == o.newest; }
  };
  struct Done {
    HeldStepCheck check;
    Begun begun;
    absl::Time ended;
  };
  // Whether `done` stands for the load of `wanted` over what is `held` now.
  bool Covers(const Done& done, int64_t wanted, const HeldSteps& held) const;
  absl::Duration KeptFor(const Done& done) const {
    return done.begun.spread ? fresh_for_ : trusted_for_;
  }
  void PruneLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  tier::MemoryTier& tier_;
  const int threads_;
  const absl::Duration fresh_for_;
  const absl::Duration trusted_for_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Begun> running_ ABSL_GUARDED_BY(mu_);  // at most one
  std::map<std::string, Begun> begun_ ABSL_GUARDED_BY(mu_);    // at most kMaxJobs
  // None kept past KeptFor after the next Begin.
  std::map<std::string, Done> done_ ABSL_GUARDED_BY(mu_);
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_EARLY_STEP_CHECK_H_
