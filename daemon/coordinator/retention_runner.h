// The daemon's retention (--retain_last, --retain_every, --retain_grace_s,
// --retention): after each commit, a garbage collection of that job under
// its policy, on a thread of its own. The save has been reported committed
// before its retention runs, so retention never slows a save down, and a
// retention failure is logged, never a failed save. Runs asked for one job
// while one is queued are one run. Retention never deletes a broken step
// (retention_policy.h).
//
// Thread-safety: Committed is safe from any thread.
#ifndef CKPT_DAEMON_COORDINATOR_RETENTION_RUNNER_H_
#define CKPT_DAEMON_COORDINATOR_RETENTION_RUNNER_H_

#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/retention.h"
#include "daemon/planning/retention_policy.h"

namespace ckpt::coordinator {

class RetentionRunner {
 public:
  RetentionRunner(GarbageCollector& gc, planning::RetentionConfig config);
  // Finishes the run in progress; queued ones are dropped (the next commit
  // after a restart runs them).
  ~RetentionRunner();

  // A step of `job` was committed: queue a run when its policy keeps fewer
  // than all steps.
  void Committed(const std::string& job);

 private:
  void Loop();

  GarbageCollector& gc_;
  const planning::RetentionConfig config_;
  absl::Mutex mu_;
  std::set<std::string> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_RETENTION_RUNNER_H_
