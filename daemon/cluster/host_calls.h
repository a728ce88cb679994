// What the coordinator's services that node daemons call share
// (CoordinatorService, SpreadPersistService): who may call (the cluster's
// admin token, for a live registered host), when a waiting caller is gone,
// and refusals bounded for the trip back.
//
// Thread-safety: all functions are safe from any thread.
#ifndef CKPT_DAEMON_CLUSTER_HOST_CALLS_H_
#define CKPT_DAEMON_CLUSTER_HOST_CALLS_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "ckpt/v1/common.pb.h"
#include "daemon/auth/caller.h"
#include "daemon/cluster/cluster_service.h"
#include "daemon/coordinator/rendezvous.h"

namespace ckpt::cluster {

// A call from node daemon `host`: the admin token, a valid host name, and
// the host registered and live here. Otherwise the status saying which.
absl::Status AdmitHost(const auth::Authenticator& auth, const ClusterServiceImpl& cluster,
                       const grpc::ServerContext& context, const v1::HostIdentity& host);

// The caller is gone once it cancelled or its deadline passed: a sync
// handler may not see a client's deadline as a cancellation while it waits.
coordinator::CallerGone CallerGoneOf(const grpc::ServerContext* context);

// A refusal as gRPC carries it: the message bounded (it travels in
// metadata; callers' inputs it quotes may be of any size).
grpc::Status Refuse(const absl::Status& status);

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_HOST_CALLS_H_
