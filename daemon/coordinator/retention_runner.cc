#include "daemon/coordinator/retention_runner.h"

#include <cstdio>

#include "absl/time/clock.h"

namespace ckpt::coordinator {

RetentionRunner::RetentionRunner(GarbageCollector& gc, planning::RetentionConfig config)
    : gc_(gc), config_(std::move(config)), thread_([this] { Loop(); }) {}

RetentionRunner::~RetentionRunner() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void RetentionRunner::Committed(const std::string& job) {
  if (config_.For(job).keep_last <= 0) return;  // keeps everything
  absl::MutexLock lock(&mu_);
  pending_.insert(job);
}

void RetentionRunner::Loop() {
  for (;;) {
    std::string job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RetentionRunner* r)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return r->stop_ || !r->pending_.empty(); },
          this));
      if (stop_) return;
      job = *pending_.begin();
      pending_.erase(pending_.begin());
    }
    planning::RetentionPolicy policy = config_.For(job);
    policy.delete_broken = false;
    // Collect logs its own line on success.
    absl::StatusOr<GcResult> result =
        gc_.Collect(job, policy, /*dry_run=*/false, absl::Now(), config_.trigger);
    if (!result.ok()) {
      std::fprintf(stderr, "ckptd: retention of job %s failed: %s\n", job.c_str(),
                   std::string(result.status().message()).c_str());
    }
  }
}

}  // namespace ckpt::coordinator
