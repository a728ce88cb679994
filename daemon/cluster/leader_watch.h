// A node daemon's view of who leads the coordinators (docs/failover.md):
// asks etcd's election service every poll interval and reports each
// change of leader (address and epoch), so the node registers with the new
// one and fails what it had in flight with the old one, naming the change.
// The highest epoch seen is kept: answers from a lower one are a deposed
// leader's, and refused.
//
// Thread-safety: all methods are safe from any thread; on_change runs on
// the watch's thread.
#ifndef CKPT_DAEMON_CLUSTER_LEADER_WATCH_H_
#define CKPT_DAEMON_CLUSTER_LEADER_WATCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/cluster/etcd_client.h"

namespace ckpt::cluster {

struct CoordinatorLeader {
  std::string address;  // empty: none stands (or etcd cannot say)
  int64_t epoch = 0;
  bool operator==(const CoordinatorLeader& o) const {
    return address == o.address && epoch == o.epoch;
  }
};

struct LeaderWatchOptions {
  std::string name = "/ckpt/coordinator";
  absl::Duration poll = absl::Milliseconds(250);
  // A new leader (or none): `before` is the one followed until now.
  std::function<void(const CoordinatorLeader& before, const CoordinatorLeader& now)> on_change;
};

class LeaderWatch {
 public:
  LeaderWatch(EtcdClient& etcd, LeaderWatchOptions options);
  ~LeaderWatch();
  void Stop();

  CoordinatorLeader leader() const;
  // The highest epoch etcd named a leader with.
  int64_t highest_epoch() const { return highest_epoch_.load(std::memory_order_acquire); }

 private:
  void Run();

  EtcdClient& etcd_;
  const LeaderWatchOptions options_;
  std::atomic<int64_t> highest_epoch_{0};
  mutable absl::Mutex mu_;
  CoordinatorLeader leader_ ABSL_GUARDED_BY(mu_);
  std::string etcd_error_ ABSL_GUARDED_BY(mu_);  // logged once per error
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_LEADER_WATCH_H_
