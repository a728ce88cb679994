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

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ckpt/v1/cluster.grpc.pb.h"

namespace ckpt::cluster {

struct CoordinatorLinkOptions {
  std::string address;      // "host:port" (TLS) or "unix:<path>"
  std::string tls_ca_file;  // the coordinator's CA; empty: the system's
  std::string token_file;   // the cluster's admin token (mode 0600)
  v1::RegisterHostRequest self;
  // What the heartbeat reports: pool use, sessions in flight, and the
  // saves spread over hosts this host takes part in.
  std::function<void(v1::HeartbeatRequest&)> sample;
  // The coordinator's answer to each heartbeat: saves it failed.
  std::function<void(const v1::HeartbeatResponse&)> on_answer;
  absl::Duration call_timeout = absl::Seconds(2);
  // Plans and persist reports of large models are big (--max_message_bytes).
  int max_message_bytes = 64 << 20;
};

class CoordinatorLink {
 public:
  // Errors only for unreadable credentials; an unreachable coordinator is
  // retried in the background.
  static absl::StatusOr<std::unique_ptr<CoordinatorLink>> Start(CoordinatorLinkOptions options);
  ~CoordinatorLink();  // Stop()
  // Ends the heartbeats (their sampler goes away first at shutdown); the
  // accessors keep answering.
  void Stop();
  CoordinatorLink(const CoordinatorLink&) = delete;
  CoordinatorLink& operator=(const CoordinatorLink&) = delete;

  bool registered() const { return registered_.load(std::memory_order_acquire); }
  // The connection to the coordinator, for its CoordinatorService too.
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  // When the coordinator last answered (a registration or a heartbeat);
  // the start when it never did. A host silent past the heartbeat timeout
  // is lost to the coordinator: its saves spread over hosts are over.
  absl::Time last_contact() const {
    return absl::FromUnixNanos(last_contact_ns_.load(std::memory_order_acquire));
  }

 private:
  explicit CoordinatorLink(CoordinatorLinkOptions options) : options_(std::move(options)) {}
  void Run();
  absl::Status RegisterOnce(absl::Duration* interval);
  absl::StatusOr<bool> HeartbeatOnce(absl::Duration interval);  // false: register again

  const CoordinatorLinkOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ClusterService::Stub> stub_;
  std::atomic<int64_t> last_contact_ns_{absl::ToUnixNanos(absl::Now())};
  std::atomic<bool> registered_{false};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_COORDINATOR_LINK_H_
