#include "daemon/server/rank_sessions.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/lib/validation.h"

namespace ckpt::server {

RankSessions::~RankSessions() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, entry] : sessions_) {
    for (auto& [lease_id, allocation] : entry.leases) pool_.Free(allocation);
  }
}

absl::StatusOr<RankSession> RankSessions::Attach(const std::string& job, int rank,
                                                 int world_size, int local_rank) {
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  if (world_size <= 0 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [0, world size ", world_size, ")"));
  }
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  RankSession session{absl::StrFormat("%016x%016x", rng(), rng()), job, rank, world_size,
                      local_rank};
  absl::MutexLock lock(&mu_);
  sessions_[session.id] = Entry{session, {}};
  return session;
}

absl::Status RankSessions::Detach(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError("unknown session; attach first");
  for (auto& [lease_id, allocation] : it->second.leases) pool_.Free(allocation);
  sessions_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<RankSession> RankSessions::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError("unknown session; attach first");
  return it->second.session;
}

absl::StatusOr<uint64_t> RankSessions::AddLease(const std::string& id,
                                                const pool::Allocation& allocation) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    pool_.Free(allocation);
    return absl::NotFoundError("session detached while its load ran");
  }
  const uint64_t lease_id = next_lease_++;
  it->second.leases[lease_id] = allocation;
  return lease_id;
}

absl::Status RankSessions::ReleaseLease(const std::string& id, uint64_t lease_id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError("unknown session; attach first");
  auto lease = it->second.leases.find(lease_id);
  if (lease == it->second.leases.end()) {
    return absl::NotFoundError(absl::StrCat("lease ", lease_id, " is not held by this session"));
  }
  pool_.Free(lease->second);
  it->second.leases.erase(lease);
  return absl::OkStatus();
}

int RankSessions::attached() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

}  // namespace ckpt::server
