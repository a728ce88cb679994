#include "daemon/server/rank_sessions.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/lib/validation.h"

namespace ckpt::server {

absl::Status CheckMember(const RankSession& rank, const std::string& job, int world_size,
                         const std::string& who) {
  if (rank.job == job && rank.world_size == world_size && rank.rank >= 0 &&
      rank.rank < world_size) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(who, "the caller (job ", rank.job, ", rank ",
                                                  rank.rank, " of ", rank.world_size,
                                                  ") is not one of its ", world_size, " ranks"));
}

absl::StatusOr<RankSession> RankSessions::Attach(const std::string& job, int rank, int world_size,
                                                 int local_rank, uid_t uid) {
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  if (world_size > limits_.max_world_size) {
    return absl::ResourceExhaustedError(absl::StrCat("world size ", world_size,
                                                     " exceeds the limit ", limits_.max_world_size,
                                                     " (--max_world_size)"));
  }
  if (world_size <= 0 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [0, world size ", world_size, ")"));
  }
  if (local_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("local rank ", local_rank, " is negative"));
  }
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  RankSession session{
      absl::StrFormat("%016x%016x", rng(), rng()), uid, job, rank, world_size, local_rank};
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(sessions_.size()) >= limits_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(sessions_.size(),
                                                     " ranks are attached; the limit is ",
                                                     limits_.max_sessions, " (--max_sessions)"));
  }
  sessions_[session.id] = session;
  return session;
}

absl::Status RankSessions::Detach(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (sessions_.erase(id) == 0) return absl::NotFoundError("unknown session; attach first");
  return absl::OkStatus();
}

absl::StatusOr<RankSession> RankSessions::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError("unknown session; attach first");
  return it->second;
}

int RankSessions::attached() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

bool RankSessions::HasJob(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, session] : sessions_) {
    if (session.job == job) return true;
  }
  return false;
}

}  // namespace ckpt::server
