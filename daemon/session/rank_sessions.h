// Attached ranks. A session is what Attach returns: it names the rank, its
// job and world. What a rank holds in the pool belongs to its saves and
// loads, which release it when they end or when the rank goes away.
//
// Session ids come from the kernel's CSPRNG: an id seen says nothing of
// another. Sessions are limited per principal before the global limit, so
// one user cannot attach the daemon full for everyone else. A session whose
// rank is gone is reaped (Stale) whether or not it ever opened its Watch
// stream: a local rank's process is watched by pid (and start time, so a
// reused pid is not mistaken for it); any session that opens no Watch
// within the grace is reaped too (a TCP caller has no pid to watch).
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_SESSION_RANK_SESSIONS_H_
#define CKPT_DAEMON_SESSION_RANK_SESSIONS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/auth/principal.h"

namespace ckpt::session {

struct RankSession {
  std::string id;
  // Who attached it: only that principal may act through it, and only a
  // local user's process may map its job's pool segments (uid; a TCP
  // principal's is Principal::kNoUid, which no process has).
  auth::Principal principal;
  uid_t uid = auth::Principal::kNoUid;
  // The attaching process (local callers; 0 over TCP) and its start time
  // (clock ticks since boot, /proc/<pid>/stat), to tell when it is gone.
  pid_t pid = 0;
  uint64_t pid_start = 0;
  std::string job;
  int rank = 0;
  int world_size = 0;
  int local_rank = 0;
  // Ranks of the job on this host: world_size when the whole job is here;
  // fewer when it spans hosts and the cluster's coordinator meets them.
  int local_world_size = 0;
  bool spans_hosts() const { return local_world_size < world_size; }
};

// PERMISSION_DENIED unless the session is one of the `world_size` ranks of
// `job`: a session only ever acts on its own job's saves and loads. `who`
// prefixes the message.
absl::Status CheckMember(const RankSession& rank, const std::string& job, int world_size,
                         const std::string& who);

struct SessionLimits {
  int max_sessions = 4096;     // attached ranks at once (--max_sessions)
  int max_world_size = 65536;  // ranks in one job (--max_world_size)
  // Attached ranks of one principal (--principal_max_sessions; 0: none).
  int max_sessions_per_principal = 1024;
  // How long a session may go without a Watch stream (--session_watch_grace_s).
  absl::Duration watch_grace = absl::Seconds(10);
};

// The start time of process `pid` (clock ticks since boot), or 0 when it
// is gone (or /proc cannot say).
uint64_t ProcessStartTime(pid_t pid);

class RankSessions {
 public:
  explicit RankSessions(SessionLimits limits = {}) : limits_(limits) {}

  // INVALID_ARGUMENT for a bad job name, rank or local world size (0 means
  // world_size); RESOURCE_EXHAUSTED naming the bound for a world or a
  // session count beyond the limits. Every rank of a job on this host must
  // give the same world and local world sizes as the ones attached before.
  // `who` attaches from process `pid` (0: over TCP).
  absl::StatusOr<RankSession> Attach(const std::string& job, int rank, int world_size,
                                     int local_rank, const auth::Principal& who,
                                     int local_world_size = 0, pid_t pid = 0);
  // The session's Watch stream opened: its end is the rank's end from now.
  void Watched(const std::string& id);
  // Sessions whose rank is gone: its process exited, or it opened no Watch
  // within the grace since `now`. The caller ends them (Detach and more).
  // Processes are looked at once per kProcessCheckInterval.
  std::vector<RankSession> Stale(absl::Time now);
  static constexpr absl::Duration kProcessCheckInterval = absl::Milliseconds(500);
  // NOT_FOUND for an unknown session.
  absl::Status Detach(const std::string& id);
  // NOT_FOUND ("unknown session; attach first") for an unknown id.
  absl::StatusOr<RankSession> Find(const std::string& id) const;
  int attached() const;
  // Whether any rank of `job` is attached.
  bool HasJob(const std::string& job) const;
  // The ranks of `job` attached here, in order, without repeats.
  std::vector<int> RanksOf(const std::string& job) const;
  // The jobs spanning hosts with ranks attached here, by name: each one's
  // world size and ranks, in order (what heartbeats tell the coordinator).
  struct SpreadJob {
    int world_size = 0;
    std::vector<int> ranks;
  };
  std::map<std::string, SpreadJob> SpreadJobs() const;

 private:
  struct Entry {
    RankSession session;
    absl::Time attached;
    bool watched = false;
  };
  const SessionLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<auth::Principal, int> per_principal_ ABSL_GUARDED_BY(mu_);
  absl::Time last_process_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace ckpt::session

#endif  // CKPT_DAEMON_SESSION_RANK_SESSIONS_H_
