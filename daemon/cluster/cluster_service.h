// ClusterService (proto/ckpt/v1/cluster.proto) of a ckptd started with
// --coordinator: node daemons register and heartbeat; ckptctl asks for the
// cluster's state. A sweeper marks hosts silent past the heartbeat timeout
// lost and logs each once; saves it takes part in fail at once.
//
// Thread-safety: gRPC calls it from any thread.
#ifndef CKPT_DAEMON_CLUSTER_CLUSTER_SERVICE_H_
#define CKPT_DAEMON_CLUSTER_CLUSTER_SERVICE_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "ckpt/v1/cluster.grpc.pb.h"
#include "daemon/auth/caller.h"
#include "daemon/cluster/host_registry.h"
#include "daemon/cluster/verify_rounds.h"
#include "daemon/coordinator/coordinator.h"

namespace ckpt::cluster {

struct ClusterServiceOptions {
  std::string instance;  // this coordinator's start
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  size_t max_hosts = 16384;
  // Told of every host lost or restarted (its saves fail, naming it), and
  // asked which of a host's saves failed, for its heartbeat's answer.
  coordinator::Coordinator* coordinator = nullptr;
  // The coordinator's memory tier (its own coordinator, coordinator.h
  // ServeClusterMemoryTier), told of hosts lost as the other is; or null.
  coordinator::Coordinator* memory_coordinator = nullptr;
  // Verifies of memory-tier steps spread over hosts: their orders ride on
  // heartbeat answers; or null.
  VerifyRounds* verify_rounds = nullptr;
  // A coordinator elected through etcd (docs/failover.md): OK while it
  // leads, else why not; nodes' calls are refused with it. Null: one
  // coordinator, always leading.
  std::function<absl::Status()> leading;
  std::function<int64_t()> epoch;  // the term's; null: 0
  // Fills ClusterStatus's election part (who leads, candidates, etcd).
  std::function<void(v1::CoordinatorElection&)> describe_election;
  // A registered host's memory-tier manifests (RegisterHostRequest): a
  // new leader's memory tier learns its steps from them. Null: ignored.
  std::function<void(const v1::RegisterHostRequest&)> adopt_memory_steps;
};

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  ClusterServiceImpl(const auth::Authenticator& auth, ClusterServiceOptions options);
  ~ClusterServiceImpl() override;  // stops the sweeper

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterHostRequest* request,
                        v1::RegisterHostResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status ClusterStatus(grpc::ServerContext* context, const v1::ClusterStatusRequest* request,
                             v1::ClusterStatusResponse* response) override;

  // Registered, and heard from within the heartbeat timeout.
  bool HostLive(const std::string& host) const;
  // OK while this coordinator leads (ClusterServiceOptions::leading).
  absl::Status CheckLeading() const;
  int64_t epoch() const { return options_.epoch ? options_.epoch() : 0; }
  // A new term: hosts registered in an earlier one register again (their
  // saves of that term are over).
  void ForgetHosts();
  // Every host registered, lost ones too (ckptctl verify asks the live
  // ones, and finds replicas' places by their domains).
  v1::ClusterStatusResponse Registry() const;
  absl::Duration heartbeat_timeout() const { return options_.heartbeat_timeout; }
  absl::Duration heartbeat_interval() const { return options_.heartbeat_interval; }

 private:
  // The coordinators told of hosts lost and saves' deadlines.
  std::vector<coordinator::Coordinator*> Coordinators() const;

  const auth::Authenticator& auth_;
  const ClusterServiceOptions options_;
  HostRegistry registry_;
  absl::Notification stop_;
  std::thread sweeper_;
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_CLUSTER_SERVICE_H_
