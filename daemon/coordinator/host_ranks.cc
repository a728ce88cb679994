#include "daemon/coordinator/host_ranks.h"

#include <algorithm>
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
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    Host& other = it->second;
    if (other.lost && it->first != host) {
      for (Job& was : other.jobs) {
        for (const Job& now : kept) {
          if (now.name != was.name || now.world_size != was.world_size) continue;
          std::vector<int> left;
          std::set_difference(was.ranks.begin(), was.ranks.end(), now.ranks.begin(),
                              now.ranks.end(), std::back_inserter(left));
          was.ranks = std::move(left);
        }
      }
      other.jobs.erase(std::remove_if(other.jobs.begin(), other.jobs.end(),
                                      [](const Job& j) { return j.ranks.empty(); }),
                       other.jobs.end());
      if (other.jobs.empty()) {
        it = hosts_.erase(it);
        continue;
      }
    }
    ++it;
  }
  if (kept.empty()) {
    hosts_.erase(host);
    return;
  }
  Host& mine = hosts_[host];
  mine.jobs = std::move(kept);
  mine.lost = false;
  mine.reason.clear();
}

void HostRanks::Lost(const std::string& host, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return;
  it->second.lost = true;
  it->second.lost_order = ++lost_count_;
  it->second.reason = reason;
  size_t lost = 0;
  auto oldest = hosts_.end();
  for (auto h = hosts_.begin(); h != hosts_.end(); ++h) {
    if (!h->second.lost) continue;
    ++lost;
    if (oldest == hosts_.end() || h->second.lost_order < oldest->second.lost_order) oldest = h;
  }
  if (lost > kMaxLostHosts) hosts_.erase(oldest);
}

void HostRanks::Registered(const std::string& host) {
  absl::MutexLock lock(&mu_);
  hosts_.erase(host);
}

std::vector<int> HostRanks::RanksOf(const std::string& host, const std::string& job,
                                    int world_size) const {
  absl::MutexLock lock(&mu_);
  auto it = hosts_.find(host);
  if (it == hosts_.end()) return {};
  for (const Job& j : it->second.jobs) {
    if (j.name == job && j.world_size == world_size) return j.ranks;
  }
  return {};
}

std::optional<HostRanks::LostCarrier> HostRanks::LostFrom(const std::string& job, int world_size,
                                                          absl::Span<const int> except) const {
  std::vector<int> brought(except.begin(), except.end());
  std::sort(brought.begin(), brought.end());
  absl::MutexLock lock(&mu_);
  for (const auto& [name, host] : hosts_) {
    if (!host.lost) continue;
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
