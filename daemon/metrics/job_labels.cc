#include "daemon/metrics/job_labels.h"

namespace ckpt::metrics {

std::string JobLabels::LabelFor(const std::string& job) {
  absl::MutexLock lock(&mu_);
  if (named_.count(job) > 0) return job;
  // A job really called "_other" ([A-Za-z0-9._-] allows it) takes no slot:
  // its series are the others' anyway.
  if (job == kOtherJobs || named_.size() >= max_jobs_) return kOtherJobs;
  named_.insert(job);
  return job;
}

std::string JobLabels::ExistingLabel(const std::string& job) {
  absl::MutexLock lock(&mu_);
  return named_.count(job) > 0 ? job : std::string(kOtherJobs);
}

}  // namespace ckpt::metrics
