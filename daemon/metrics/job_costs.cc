#include "daemon/metrics/job_costs.h"

#include <algorithm>

namespace ckpt::metrics {
namespace {

constexpr double kNewest = 0.3;

void Smooth(double& average, double sample, bool first) {
  average = first ? sample : average + kNewest * (sample - average);
}

}  // namespace

void JobCosts::Saved(const std::string& job, absl::Time start, absl::Duration snapshot,
                     absl::Duration persist, absl::Time committed) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    if (jobs_.size() >= kMaxJobs) {
      auto oldest = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
        return a.second.cost.last_commit < b.second.cost.last_commit;
      });
      jobs_.erase(oldest);
    }
    it = jobs_.emplace(job, Entry{}).first;
    it->second.cost.job = job;
  }
  Entry& e = it->second;
  const bool first = e.cost.saves == 0;
  if (!first && start > e.last_start) {
    // The second save gives the first interval.
    Smooth(e.cost.interval_s, absl::ToDoubleSeconds(start - e.last_start), e.cost.saves == 1);
  }
  Smooth(e.cost.snapshot_s, absl::ToDoubleSeconds(snapshot), first);
  Smooth(e.cost.persist_s, absl::ToDoubleSeconds(persist), first);
  ++e.cost.saves;
  e.cost.last_commit = committed;
  e.last_start = std::max(e.last_start, start);
}

std::vector<JobCost> JobCosts::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<JobCost> out;
  out.reserve(jobs_.size());
  for (const auto& [name, e] : jobs_) out.push_back(e.cost);
  return out;
}

}  // namespace ckpt::metrics
