#include "daemon/server/rank_sessions.h"

#include <random>
#include <set>

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
                                                 int local_rank, uid_t uid, int local_world_size) {
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
  if (local_world_size == 0) local_world_size = world_size;
  if (local_world_size < 0 || local_world_size > world_size) {
    return absl::InvalidArgumentError(absl::StrCat("local world size ", local_world_size,
                                                   " is not in [1, world size ", world_size, "]"));
  }
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  RankSession session{absl::StrFormat("%016x%016x", rng(), rng()),
                      uid,
                      job,
                      rank,
                      world_size,
                      local_rank,
                      local_world_size};
  absl::MutexLock lock(&mu_);
  for (const auto& [id, other] : sessions_) {
    // A save of a job spanning hosts waits for local_world_size ranks
    // here: two counts for one job would leave it waiting for ranks that
    // never come. (A job on this host alone may reattach with another
    // world to load into a new layout.)
    const bool spans = session.spans_hosts() || other.spans_hosts();
    if (other.job == job && spans &&
        (other.world_size != world_size || other.local_world_size != local_world_size)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job, " is attached here with world size ", other.world_size,
                       " and local world size ", other.local_world_size, "; this rank says ",
                       world_size, " and ", local_world_size));
    }
  }
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

std::vector<int> RankSessions::RanksOf(const std::string& job) const {
  std::set<int> ranks;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, session] : sessions_) {
    if (session.job == job) ranks.insert(session.rank);
  }
  return {ranks.begin(), ranks.end()};
}

std::vector<int> RankSessions::MissingRanks(const std::string& job, int world_size,
                                            int local_world_size,
                                            const std::function<bool(int)>& done,
                                            size_t max) const {
  std::vector<int> missing;
  auto consider = [&](int r) {
    if (!done(r)) missing.push_back(r);
    return missing.size() < max;
  };
  if (local_world_size < world_size) {
    for (int r : RanksOf(job)) {
      if (!consider(r)) break;
    }
  } else {
    for (int r = 0; r < world_size; ++r) {
      if (!consider(r)) break;
    }
  }
  return missing;
}

}  // namespace ckpt::server
