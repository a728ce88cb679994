// A node daemon's link to the coordinator (--coordinator_address): registers
// this host, then heartbeats at the interval the coordinator asks for; when
// the coordinator does not know this instance (it restarted, or declared
// the host lost) it registers again. Contact lost and regained is logged
// once each, not per attempt.
//
// Thread-safety: one background thread; the accessors are safe anywhere.
#ifndef CKPT_DAEMON_CLUSTER_COORDINATOR_LINK_H_
#define CKPT_DAEMON_CLUSTER_COORDINATOR_LINK_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "ckpt/v1/cluster.grpc.pb.h"

namespace ckpt::cluster {

struct CoordinatorLinkOptions {
  std::string address;      // "host:port" (TLS) or "unix:<path>"
  std::string tls_ca_file;  // the coordinator's CA; empty: the system's
  std::string token_file;   // the cluster's admin token (mode 0600)
  v1::RegisterHostRequest self;
  // What the heartbeat reports: pool use and sessions in flight.
  std::function<void(v1::HeartbeatRequest&)> sample;
  absl::Duration call_timeout = absl::Seconds(2);
};

class CoordinatorLink {
 public:
  // Errors only for unreadable credentials; an unreachable coordinator is
  // retried in the background.
  static absl::StatusOr<std::unique_ptr<CoordinatorLink>> Start(CoordinatorLinkOptions options);
  ~CoordinatorLink();
  CoordinatorLink(const CoordinatorLink&) = delete;
  CoordinatorLink& operator=(const CoordinatorLink&) = delete;

  bool registered() const { return registered_.load(std::memory_order_acquire); }

 private:
  explicit CoordinatorLink(CoordinatorLinkOptions options) : options_(std::move(options)) {}
  void Run();
  absl::Status RegisterOnce(absl::Duration* interval);
  absl::StatusOr<bool> HeartbeatOnce(absl::Duration interval);  // false: register again

  const CoordinatorLinkOptions options_;
  std::unique_ptr<v1::ClusterService::Stub> stub_;
  std::atomic<bool> registered_{false};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_COORDINATOR_LINK_H_
