// The job label of every per-job metric, with bounded cardinality: the first
// `max_jobs` distinct jobs the daemon sees get their own label value (their
// name), every later one is reported as ckpt_job="_other". A daemon that serves
// thousands of short-lived jobs must not make Prometheus store thousands of
// series per metric; the first jobs keep theirs for the daemon's life, so a
// series never changes meaning while the daemon runs.
//
// Thread-safety: safe from any thread.
#ifndef CKPT_DAEMON_METRICS_JOB_LABELS_H_
#define CKPT_DAEMON_METRICS_JOB_LABELS_H_

#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::metrics {

inline constexpr char kOtherJobs[] = "_other";

class JobLabels {
 public:
  explicit JobLabels(int max_jobs) : max_jobs_(max_jobs < 0 ? 0 : max_jobs) {}

  // The label value for `job`; the first call for a new job decides it.
  std::string LabelFor(const std::string& job) ABSL_LOCKS_EXCLUDED(mu_);
  // The label `job` already has, or "_other", without taking a slot: for
  // jobs merely found on disk, which on a shared root may be any number of
  // other hosts' jobs and must not crowd out the jobs this daemon serves.
  std::string ExistingLabel(const std::string& job) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t max_jobs_;
  absl::Mutex mu_;
  std::set<std::string> named_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::metrics

#endif  // CKPT_DAEMON_METRICS_JOB_LABELS_H_
