// What a checkpoint costs each job, from the daemon's own clocks, for
// `ckptctl status` (and the interval that pays, given a failure rate): how
// long its saves take to be snapshotted (what a blocking save stalls the
// trainer; a lazy one stalls less), to commit, and how often they come.
// Smoothed over the last saves (an exponential average, the newest
// weighing 0.3), so one slow save moves it without owning it.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_METRICS_JOB_COSTS_H_
#define CKPT_DAEMON_METRICS_JOB_COSTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ckpt::metrics {

struct JobCost {
  std::string job;
  uint64_t saves = 0;     // committed saves seen
  double snapshot_s = 0;  // first rank's request to every rank snapshotted
  double persist_s = 0;   // first rank's request to the commit
  double interval_s = 0;  // between consecutive saves' starts; 0 until two
  absl::Time last_commit;
};

class JobCosts {
 public:
  // Jobs kept: past it, the one that saved least recently goes.
  static constexpr size_t kMaxJobs = 1024;

  // A committed save of `job` that began at `start`.
  void Saved(const std::string& job, absl::Time start, absl::Duration snapshot,
             absl::Duration persist, absl::Time committed);
  // Every job's, by name.
  std::vector<JobCost> All() const;

 private:
  struct Entry {
    JobCost cost;
    absl::Time last_start;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::metrics

#endif  // CKPT_DAEMON_METRICS_JOB_COSTS_H_
