// Attached ranks. A session is what Attach returns: it names the rank, its
// job and world, and owns the load leases handed to that rank until it
// releases them or detaches.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_SERVER_RANK_SESSIONS_H_
#define CKPT_DAEMON_SERVER_RANK_SESSIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/pool/shm_pool.h"

namespace ckpt::server {

struct RankSession {
  std::string id;
  std::string job;
  int rank = 0;
  int world_size = 0;
  int local_rank = 0;
};

class RankSessions {
 public:
  explicit RankSessions(pool::ShmPool& pool) : pool_(pool) {}
  ~RankSessions();

  absl::StatusOr<RankSession> Attach(const std::string& job, int rank, int world_size,
                                     int local_rank);
  // Frees the session's leases. NOT_FOUND for an unknown session.
  absl::Status Detach(const std::string& id);
  // NOT_FOUND ("unknown session; attach first") for an unknown id.
  absl::StatusOr<RankSession> Find(const std::string& id) const;

  // Takes ownership of a load lease for the session; returns its id.
  absl::StatusOr<uint64_t> AddLease(const std::string& id, const pool::Allocation& allocation);
  absl::Status ReleaseLease(const std::string& id, uint64_t lease_id);
  int attached() const;

 private:
  struct Entry {
    RankSession session;
    std::map<uint64_t, pool::Allocation> leases;
  };
  pool::ShmPool& pool_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_RANK_SESSIONS_H_
