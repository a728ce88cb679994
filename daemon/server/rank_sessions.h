// Attached ranks. A session is what Attach returns: it names the rank, its
// job and world. What a rank holds in the pool belongs to its saves and
// loads, which release it when they end or when the rank goes away.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_SERVER_RANK_SESSIONS_H_
#define CKPT_DAEMON_SERVER_RANK_SESSIONS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::server {

struct RankSession {
  std::string id;
  // The local user that attached it: only that user may act through it
  // (TCP operators count as the daemon's own user).
  uid_t uid = 0;
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
};

class RankSessions {
 public:
  explicit RankSessions(SessionLimits limits = {}) : limits_(limits) {}

  // INVALID_ARGUMENT for a bad job name, rank or local world size (0 means
  // world_size); RESOURCE_EXHAUSTED naming the bound for a world or a
  // session count beyond the limits. Every rank of a job on this host must
  // give the same world and local world sizes as the ones attached before.
  absl::StatusOr<RankSession> Attach(const std::string& job, int rank, int world_size,
                                     int local_rank, uid_t uid = 0, int local_world_size = 0);
  // NOT_FOUND for an unknown session.
  absl::Status Detach(const std::string& id);
  // NOT_FOUND ("unknown session; attach first") for an unknown id.
  absl::StatusOr<RankSession> Find(const std::string& id) const;
  int attached() const;
  // Whether any rank of `job` is attached.
  bool HasJob(const std::string& job) const;
  // The ranks of `job` attached here, in order, without repeats.
  std::vector<int> RanksOf(const std::string& job) const;
  // For a timeout's message: this host's ranks of `job` that are not
  // `done`, in order, at most `max`. Its ranks are 0..world_size-1 when the
  // whole job is here, else those attached here.
  std::vector<int> MissingRanks(const std::string& job, int world_size, int local_world_size,
                                const std::function<bool(int)>& done, size_t max) const;

 private:
  const SessionLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, RankSession> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_RANK_SESSIONS_H_
