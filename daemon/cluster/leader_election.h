// A coordinator's candidacy (docs/failover.md): campaigns through etcd's
// election service under a lease of a few seconds, renews the lease while
// it stands, and tells the coordinator when it is elected and when it is
// not the leader any more (the lease lapsed, etcd could not be reached for
// a lease's time, or its key is gone). Then it campaigns again, under a
// new lease.
//
// The epoch of a term is the revision that created its election key:
// etcd's revisions only grow, so a later leader always has a higher epoch,
// and storage fences commits with it (coordinator/epoch_fence.h).
//
// A leader counts as leading only while the lease it last renewed cannot
// have lapsed at etcd: renewals are timed from when they were sent, and a
// term ends locally a margin before the lease would (a process paused past
// its lease finds itself deposed the moment it runs again).
//
// Thread-safety: all methods are safe from any thread; the callbacks run
// on the election's thread, one at a time.
#ifndef CKPT_DAEMON_CLUSTER_LEADER_ELECTION_H_
#define CKPT_DAEMON_CLUSTER_LEADER_ELECTION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/cluster/etcd_client.h"

namespace ckpt::cluster {

struct LeaderElectionOptions {
  std::string name = "/ckpt/coordinator";  // the election (an etcd key prefix)
  std::string address;                     // this coordinator's, as nodes reach it
  absl::Duration lease_ttl = absl::Seconds(5);
  // Elected: the epoch of the new term. Runs before leading() turns true.
  std::function<void(int64_t epoch)> on_elected;
  // The term ended without a resignation: why, naming this coordinator and
  // the term's epoch (the coordinator fails what it had in flight with it).
  std::function<void(const std::string& reason)> on_deposed;
};

class LeaderElection {
 public:
  static absl::StatusOr<std::unique_ptr<LeaderElection>> Start(EtcdClient& etcd,
                                                               LeaderElectionOptions options);
  ~LeaderElection();  // Stop()
  // Resigns (the next candidate takes over at once) and revokes the lease.
  void Stop();
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  bool leading() const;
  // The current term's epoch while leading; the last one's after.
  int64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // OK while leading; FAILED_PRECONDITION saying why not otherwise.
  absl::Status CheckLeading() const;
  const std::string& address() const { return options_.address; }
  const std::string& name() const { return options_.name; }
  uint64_t elections_won() const { return elections_won_.load(std::memory_order_relaxed); }
  uint64_t leases_lost() const { return leases_lost_.load(std::memory_order_relaxed); }

 private:
  LeaderElection(EtcdClient& etcd, LeaderElectionOptions options)
      : etcd_(etcd), options_(std::move(options)) {}
  void Run();
  void Renew();  // the renewal thread
  // One candidacy: a lease, a campaign, a term. Returns when it ends.
  void Stand();
  // Why the term held under `lease` is over, or "" while it holds.
  std::string TermOver(int64_t lease, const EtcdLeaderKey& key);
  absl::Duration Validity() const { return options_.lease_ttl * 0.75; }

  EtcdClient& etcd_;
  const LeaderElectionOptions options_;
  absl::Notification stop_;
  EtcdCancel campaign_cancel_;             // ends a campaign at Stop
  std::atomic<int64_t> lease_{0};          // the lease renewed now; 0 none
  std::atomic<int64_t> renewed_at_ns_{0};  // when its last renewal was sent
  std::atomic<int64_t> gone_lease_{0};     // the lease etcd said expired
  std::atomic<bool> leading_{false};
  std::atomic<int64_t> epoch_{0};
  std::atomic<uint64_t> elections_won_{0};
  std::atomic<uint64_t> leases_lost_{0};
  mutable absl::Mutex mu_;
  EtcdLeaderKey key_ ABSL_GUARDED_BY(mu_);  // of the term, to resign it
  std::string not_leading_ ABSL_GUARDED_BY(mu_) = "not elected yet";
  std::thread thread_;
  std::thread renewer_;
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_LEADER_ELECTION_H_
