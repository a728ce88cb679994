// A node daemon's link to the coordinator (--coordinator_address, or the
// leader etcd names: Follow): registers this host, then heartbeats at the
// interval the coordinator asks for; when the coordinator does not know
// this instance (it restarted, declared the host lost, or is a new leader)
// it registers again. Contact lost and regained is logged once each, not
// per attempt. Registration exchanges protocol versions
// (proto/lib/cluster_protocol.h); answers from an epoch lower than the
// highest seen are a deposed leader's and count as no answer.
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

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ckpt/v1/cluster.grpc.pb.h"

namespace ckpt::cluster {

struct CoordinatorLinkOptions {
  std::string address;      // "host:port" (TLS) or "unix:<path>"; empty: until Follow
  std::string tls_ca_file;  // the coordinator's CA; empty: the system's
  std::string token_file;   // the cluster's admin token (mode 0600)
  v1::RegisterHostRequest self;
  // Fills what changes between registrations (the memory-tier steps held).
  std::function<void(v1::RegisterHostRequest&)> registering;
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
  // The connection to the coordinator, for its CoordinatorService too; and
  // the address it goes to. Both change when the link follows a new leader.
  std::shared_ptr<grpc::Channel> channel() const;
  std::string address() const;
  // Talk to the coordinator at `address`, the leader of `epoch`, from now
  // on: a new connection, registered anew. Empty: none leads (the link
  // waits).
  void Follow(const std::string& address, int64_t epoch);
  // The highest leader epoch seen (etcd's or the coordinator's answers).
  int64_t highest_epoch() const { return highest_epoch_.load(std::memory_order_acquire); }
  // Why the last registration was refused, "" after one succeeded.
  std::string last_refusal() const;
  // Counts the leaders followed (Follow calls); AwaitNewLeader waits until
  // it passes `seen` and a leader is known, or `timeout` passes (false).
  uint64_t generation() const;
  bool AwaitNewLeader(uint64_t seen, absl::Duration timeout) const;
  // When the coordinator last answered (a registration or a heartbeat);
  // the start when it never did. A host silent past the heartbeat timeout
  // is lost to the coordinator: its saves spread over hosts are over.
  absl::Time last_contact() const {
    return absl::FromUnixNanos(last_contact_ns_.load(std::memory_order_acquire));
  }

 private:
  explicit CoordinatorLink(CoordinatorLinkOptions options) : options_(std::move(options)) {}
  void Run();
  // The coordinator now followed: its address and stub (null: none).
  struct Target {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<v1::ClusterService::Stub> stub;
  };
  Target CurrentTarget() const;
  void Connect(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RegisterOnce(const Target& target, absl::Duration* interval);
  // false: register again.
  absl::StatusOr<bool> HeartbeatOnce(const Target& target, absl::Duration interval);
  // An answer from a lower epoch than seen: the deposed leader's.
  absl::Status CheckEpoch(const Target& target, int64_t epoch);
  void SawEpoch(int64_t epoch);

  const CoordinatorLinkOptions options_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  mutable absl::Mutex mu_;
  Target target_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by Follow
  std::string last_refusal_ ABSL_GUARDED_BY(mu_);
  mutable absl::CondVar changed_;  // Follow or Stop: the loop wakes
  std::atomic<int64_t> highest_epoch_{0};
  std::atomic<int64_t> last_contact_ns_{absl::ToUnixNanos(absl::Now())};
  std::atomic<bool> registered_{false};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_COORDINATOR_LINK_H_
