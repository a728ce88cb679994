#include "daemon/session/rank_sessions.h"

#include <fstream>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/lib/secure_random.h"
#include "proto/lib/validation.h"

namespace ckpt::session {

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

uint64_t ProcessStartTime(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
  std::string text;
  if (!std::getline(file, text)) return 0;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the
  // fields after the last ')' are fixed, the start time the 20th of them.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(text).substr(close + 1), ' ', absl::SkipEmpty());
  uint64_t start = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &start)) return 0;
  return start;
}

absl::StatusOr<RankSession> RankSessions::Attach(const std::string& job, int rank, int world_size,
                                                 int local_rank, const auth::Principal& who,
                                                 int local_world_size, pid_t pid) {
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
  RankSession session;
  session.id = RandomHex(16);
  session.principal = who;
  session.uid = who.is_local_user() ? who.uid() : auth::Principal::kNoUid;
  session.pid = pid;
  session.pid_start = ProcessStartTime(pid);
  session.job = job;
  session.rank = rank;
  session.world_size = world_size;
  session.local_rank = local_rank;
  session.local_world_size = local_world_size;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, entry] : sessions_) {
    const RankSession& other = entry.session;
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
  // Per principal first: one user's flood is refused before it can fill
  // the daemon for everyone.
  int& mine = per_principal_[who];
  if (limits_.max_sessions_per_principal > 0 && mine >= limits_.max_sessions_per_principal) {
    if (mine == 0) per_principal_.erase(who);
    return absl::ResourceExhaustedError(
        absl::StrCat(who.Describe(), " has ", mine, " ranks attached; its limit is ",
                     limits_.max_sessions_per_principal, " (--principal_max_sessions)"));
  }
  if (static_cast<int>(sessions_.size()) >= limits_.max_sessions) {
    if (mine == 0) per_principal_.erase(who);
    return absl::ResourceExhaustedError(absl::StrCat(sessions_.size(),
                                                     " ranks are attached; the limit is ",
                                                     limits_.max_sessions, " (--max_sessions)"));
  }
  ++mine;
  sessions_[session.id] = Entry{session, absl::Now(), false};
  return session;
}

absl::Status RankSessions::Detach(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError("unknown session; attach first");
  auto count = per_principal_.find(it->second.session.principal);
  if (count != per_principal_.end() && --count->second <= 0) per_principal_.erase(count);
  sessions_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<RankSession> RankSessions::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return absl::NotFoundError("unknown session; attach first");
  return it->second.session;
}

void RankSessions::Watched(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it != sessions_.end()) it->second.watched = true;
}

std::vector<RankSession> RankSessions::Stale(absl::Time now) {
  std::vector<RankSession> local;  // checked outside mu_: /proc reads
  std::vector<RankSession> stale;
  {
    absl::MutexLock lock(&mu_);
    // Processes are looked at once per kProcessCheckInterval, not at every
    // call: a host's thousand sessions would read /proc ten thousand times
    // a second at the reaper's pace.
    const bool check_processes = now - last_process_check_ >= kProcessCheckInterval;
    if (check_processes) last_process_check_ = now;
    for (const auto& [id, entry] : sessions_) {
      if (!entry.watched && now - entry.attached > limits_.watch_grace) {
        stale.push_back(entry.session);
      } else if (check_processes && entry.session.pid > 0) {
        local.push_back(entry.session);
      }
    }
  }
  // Ranks of one process share its pid: one read each.
  std::map<std::pair<pid_t, uint64_t>, bool> gone;
  for (RankSession& session : local) {
    auto [it, added] = gone.try_emplace({session.pid, session.pid_start}, false);
    if (added) {
      // A start time we could not read at attach cannot be compared: the
      // pid alone then says whether the process is there.
      const uint64_t start = ProcessStartTime(session.pid);
      it->second = start == 0 || (session.pid_start != 0 && start != session.pid_start);
    }
    if (it->second) stale.push_back(std::move(session));
  }
  return stale;
}

int RankSessions::attached() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

bool RankSessions::HasJob(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, session] : sessions_) {
    if (session.session.job == job) return true;
  }
  return false;
}

std::vector<int> RankSessions::RanksOf(const std::string& job) const {
  std::set<int> ranks;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, session] : sessions_) {
    if (session.session.job == job) ranks.insert(session.session.rank);
  }
  return {ranks.begin(), ranks.end()};
}

std::map<std::string, RankSessions::SpreadJob> RankSessions::SpreadJobs() const {
  std::map<std::string, std::set<int>> ranks;
  std::map<std::string, SpreadJob> jobs;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, entry] : sessions_) {
    const RankSession& s = entry.session;
    if (!s.spans_hosts()) continue;
    ranks[s.job].insert(s.rank);
    jobs[s.job].world_size = s.world_size;  // every rank of a job gives the same
  }
  for (auto& [job, spread] : jobs) spread.ranks.assign(ranks[job].begin(), ranks[job].end());
  return jobs;
}

}  // namespace ckpt::session
