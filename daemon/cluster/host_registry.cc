#include "daemon/cluster/host_registry.h"

#include "absl/strings/str_cat.h"
#include "proto/lib/validation.h"

namespace ckpt::cluster {
namespace {

constexpr size_t kMaxAddress = 256;
// What a heartbeat's progress may hold, kept per host: a host reports at
// most this many saves and loads, with short phases, under valid job names.
constexpr int kMaxProgress = 64;
constexpr size_t kMaxPhase = 64;

// The first kMaxProgress entries of `from` that name a valid job, with
// their phase cut to kMaxPhase: what a host says is shown, never trusted
// to be small.
template <typename Progress>
void KeepProgress(const google::protobuf::RepeatedPtrField<Progress>& from,
                  google::protobuf::RepeatedPtrField<Progress>* to) {
  to->Clear();
  for (const Progress& p : from) {
    if (to->size() == kMaxProgress) break;
    if (!ValidateName("job", p.job()).ok()) continue;
    Progress* kept = to->Add();
    *kept = p;
    if (kept->phase().size() > kMaxPhase) kept->mutable_phase()->resize(kMaxPhase);
  }
}

// The jobs a heartbeat says the host carries, bounded as the coordinator's
// HostRanks keeps them (shown, not trusted).
void KeepCarried(const google::protobuf::RepeatedPtrField<v1::CarriedJob>& from,
                 google::protobuf::RepeatedPtrField<v1::CarriedJob>* to) {
  constexpr int kMaxJobs = 64;
  constexpr int kMaxRanks = 4096;
  to->Clear();
  int ranks = 0;
  for (const v1::CarriedJob& job : from) {
    if (to->size() == kMaxJobs || ranks == kMaxRanks) break;
    if (!ValidateName("job", job.job()).ok()) continue;
    v1::CarriedJob* kept = to->Add();
    kept->set_job(job.job());
    kept->set_world_size(job.world_size());
    for (uint32_t rank : job.ranks()) {
      if (ranks == kMaxRanks) break;
      kept->add_ranks(rank);
      ++ranks;
    }
  }
}

}  // namespace

void HostRegistry::Clear() {
  absl::MutexLock lock(&mu_);
  hosts_.clear();
}

absl::Status HostRegistry::Register(const v1::RegisterHostRequest& request, absl::Time now) {
  const std::string& name = request.host().host();
  if (absl::Status s = ValidateName("host", name); !s.ok()) return s;
  if (absl::Status s = ValidateName("instance", request.instance()); !s.ok()) return s;
  if (!request.failure_domain().empty()) {
    if (absl::Status s = ValidateName("failure domain", request.failure_domain()); !s.ok()) {
      return s;
    }
  }
  if (request.host().address().size() > kMaxAddress) {
    return absl::InvalidArgumentError(absl::StrCat("host ", name, ": its peer address is ",
                                                   request.host().address().size(),
                                                   " bytes; the limit is ", kMaxAddress));
  }
  absl::MutexLock lock(&mu_);
  auto known = hosts_.find(name);
  if (known != hosts_.end() && known->second.info.instance() != request.instance() &&
      !Lost(known->second, now)) {
    // Two daemons with one --host_name (cloned machines), or one taking
    // another's place: the live one keeps it.
    return absl::AlreadyExistsError(absl::StrCat(
        "host ", name, " is registered by another daemon (instance ", known->second.info.instance(),
        "), heard from ", absl::FormatDuration(now - known->second.last_heard),
        " ago; give each daemon its own --host_name. The name is free once that one is silent "
        "for ",
        absl::FormatDuration(options_.heartbeat_timeout)));
  }
  if (known == hosts_.end() && hosts_.size() >= options_.max_hosts) {
    // Room from the host lost longest ago; live hosts are never dropped.
    auto oldest = hosts_.end();
    for (auto it = hosts_.begin(); it != hosts_.end(); ++it) {
      if (Lost(it->second, now) &&
          (oldest == hosts_.end() || it->second.last_heard < oldest->second.last_heard)) {
        oldest = it;
      }
    }
    if (oldest == hosts_.end()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host ", name, ": the coordinator holds ", hosts_.size(),
                       " live hosts already; the limit is ", options_.max_hosts));
    }
    hosts_.erase(oldest);
  }
  Host& host = hosts_[name];
  host.info = v1::ClusterHost();
  *host.info.mutable_host() = request.host();
  host.info.set_instance(request.instance());
  host.info.set_failure_domain(request.failure_domain());
  host.info.set_pool_bytes(request.pool_bytes());
  host.last_heard = now;
  return absl::OkStatus();
}

bool HostRegistry::Heartbeat(const v1::HeartbeatRequest& request, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = hosts_.find(request.host());
  if (it == hosts_.end() || it->second.info.lost() ||
      it->second.info.instance() != request.instance()) {
    return false;
  }
  it->second.last_heard = now;
  it->second.info.set_pool_used(request.pool_used());
  it->second.info.set_sessions(request.sessions());
  KeepProgress(request.saves(), it->second.info.mutable_saves());
  KeepProgress(request.loads(), it->second.info.mutable_loads());
  KeepCarried(request.jobs(), it->second.info.mutable_jobs());
  return true;
}

std::vector<std::string> HostRegistry::ExpireSilent(absl::Time now) {
  std::vector<std::string> lost;
  absl::MutexLock lock(&mu_);
  for (auto& [name, host] : hosts_) {
    if (!host.info.lost() && Lost(host, now)) {
      host.info.set_lost(true);
      lost.push_back(name);
    }
  }
  return lost;
}

std::vector<std::string> HostRegistry::LostHosts(absl::Time now, size_t max) const {
  std::vector<std::string> lost;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, host] : hosts_) {
    if (lost.size() == max) break;
    if (Lost(host, now)) lost.push_back(name);
  }
  return lost;
}

v1::ClusterStatusResponse HostRegistry::Status(absl::Time now) const {
  v1::ClusterStatusResponse status;
  status.set_heartbeat_timeout_s(absl::ToDoubleSeconds(options_.heartbeat_timeout));
  absl::MutexLock lock(&mu_);
  for (const auto& [name, host] : hosts_) {
    v1::ClusterHost* out = status.add_hosts();
    *out = host.info;
    out->set_heartbeat_age_s(absl::ToDoubleSeconds(now - host.last_heard));
    // Silent past the timeout counts as lost even before the sweep ran.
    out->set_lost(Lost(host, now));
  }
  return status;
}

size_t HostRegistry::live_hosts() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [name, host] : hosts_) n += host.info.lost() ? 0 : 1;
  return n;
}

bool HostRegistry::Live(const std::string& host, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  auto it = hosts_.find(host);
  return it != hosts_.end() && !Lost(it->second, now);
}

}  // namespace ckpt::cluster
