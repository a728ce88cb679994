#include "daemon/coordinator/host_ranks.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/lib/validation.h"

namespace ckpt::coordinator {

void HostRanks::Carries(const std::string& host,
                        const google::protobuf::RepeatedPtrField<v1::CarriedJob>& jobs) {
  std::vector<Job> kept;
  int ranks = 0;
  for (const v1::CarriedJob& carried : jobs) {
    if (static_cast<int>(kept.size()) == kMaxJobs || ranks == kMaxRanks) break;
    if (!ValidateName("job", carried.job()).ok() || carried.world_size() == 0 ||
        carried.world_size() > static_cast<uint32_t>(INT32_MAX)) {
      continue;
    }
    Job job{carried.job(), static_cast<int>(carried.world_size()), {}};
    for (uint32_t rank : carried.ranks()) {
      if (ranks == kMaxRanks) break;
      if (rank >= carried.world_size()) continue;
      job.ranks.push_back(static_cast<int>(rank));
      ++ranks;
    }
    std::sort(job.ranks.begin(), job.ranks.end());
    job.ranks.erase(std::unique(job.ranks.begin(), job.ranks.end()), job.ranks.end());
    if (!job.ranks.empty()) kept.push_back(std::move(job));
  }
  absl::MutexLock lock(&mu_);
  // Ranks carried here are not lost elsewhere: the job went on without
  // that host.
  for (auto it = lost_.begin(); it != lost_.end();) {
    std::vector<Job>& was_jobs = it->second.jobs;
    for (Job& was : was_jobs) {
      for (const Job& now : kept) {
        if (now.name != was.name || now.world_size != was.world_size) continue;
        std::vector<int> left;
        std::set_difference(was.ranks.begin(), was.ranks.end(), now.ranks.begin(), now.ranks.end(),
                            std::back_inserter(left));
        was.ranks = std::move(left);
      }
    }
    was_jobs.erase(std::remove_if(was_jobs.begin(), was_jobs.end(),
                                  [](const Job& j) { return j.ranks.empty(); }),
                   was_jobs.end());
    it = was_jobs.empty() ? lost_.erase(it) : std::next(it);
  }
  lost_.erase(host);  // heard from: live
  if (kept.empty()) {
    live_.erase(host);
  } else {
    live_[host] = std::move(kept);
  }
}

void HostRanks::Lost(const std::string& host, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(host);
  if (it == live_.end()) return;
  LostHost& lost = lost_[host];
  lost.jobs = std::move(it->second);
  lost.order = ++lost_count_;
  lost.reason = reason;
  live_.erase(it);
  if (lost_.size() <= kMaxLostHosts) return;
  auto oldest = lost_.begin();
  for (auto h = lost_.begin(); h != lost_.end(); ++h) {
    if (h->second.order < oldest->second.order) oldest = h;
  }
  lost_.erase(oldest);
}

void HostRanks::Registered(const std::string& host) {
  absl::MutexLock lock(&mu_);
  live_.erase(host);
  lost_.erase(host);
}

std::vector<int> HostRanks::RanksOf(const std::string& host, const std::string& job,
                                    int world_size) const {
  absl::MutexLock lock(&mu_);
  const std::vector<Job>* jobs = nullptr;
  if (auto live = live_.find(host); live != live_.end()) jobs = &live->second;
  if (auto lost = lost_.find(host); lost != lost_.end()) jobs = &lost->second.jobs;
  if (jobs == nullptr) return {};
  for (const Job& j : *jobs) {
    if (j.name == job && j.world_size == world_size) return j.ranks;
  }
  return {};
}

std::optional<HostRanks::LostCarrier> HostRanks::LostFrom(const std::string& job, int world_size,
                                                          absl::Span<const int> except) const {
  std::vector<int> brought(except.begin(), except.end());
  std::sort(brought.begin(), brought.end());
  absl::MutexLock lock(&mu_);
  for (const auto& [name, host] : lost_) {
    for (const Job& j : host.jobs) {
      if (j.name != job || j.world_size != world_size) continue;
      std::vector<int> missing;
      std::set_difference(j.ranks.begin(), j.ranks.end(), brought.begin(), brought.end(),
                          std::back_inserter(missing));
      if (!missing.empty()) return LostCarrier{name, std::move(missing), host.reason};
    }
  }
  return std::nullopt;
}

absl::Status HostRanks::LostError(const std::string& host, absl::Span<const int> ranks,
                                  int world_size, const std::string& reason) {
  constexpr size_t kNamed = 16;  // a long list says how many more
  std::vector<int> named(ranks.begin(), ranks.begin() + std::min(ranks.size(), kNamed));
  std::string which = absl::StrJoin(named, ", ");
  if (ranks.size() > kNamed) absl::StrAppend(&which, " and ", ranks.size() - kNamed, " more");
  const std::string of =
      ranks.empty() ? std::string()
                    : absl::StrCat(" (ranks ", which, " of ", world_size, " carried there)");
  return absl::UnavailableError(absl::StrCat("host ", host, of, " ", reason));
}

}  // namespace ckpt::coordinator
