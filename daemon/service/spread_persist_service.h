// The durable copy of memory+durable steps of jobs spread over hosts over
// gRPC (proto SpreadPersistService; the gathering is tier/spread_persist.h):
// the coordinator's service, and a host's client of it, remote or in this
// process (the coordinator's own host).
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_SERVICE_SPREAD_PERSIST_SERVICE_H_
#define CKPT_DAEMON_SERVICE_SPREAD_PERSIST_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ckpt/v1/coordinator.grpc.pb.h"
#include "daemon/auth/caller.h"
#include "daemon/cluster/cluster_service.h"
#include "daemon/tier/spread_persist.h"

namespace ckpt::service {

// At the coordinator: only registered, live hosts with the admin token.
class SpreadPersistServiceImpl final : public v1::SpreadPersistService::Service {
 public:
  SpreadPersistServiceImpl(const auth::Authenticator& auth, tier::SpreadPersists& persists,
                           const cluster::ClusterServiceImpl& cluster)
      : auth_(auth), persists_(persists), cluster_(cluster) {}

  grpc::Status OpenPersist(grpc::ServerContext* context, const v1::SpreadPersistOpen* request,
                           v1::SpreadPersistDir* response) override;
  grpc::Status ReportPersistCopied(grpc::ServerContext* context,
                                   const v1::SpreadPersistCopied* request,
                                   v1::SpreadPersistResult* response) override;

 private:
  const auth::Authenticator& auth_;
  tier::SpreadPersists& persists_;
  const cluster::ClusterServiceImpl& cluster_;
};

// A host's way to it: the coordinator over the channel `channel` gives at
// each call (the leader's: it changes with elections; null while none
// leads), or the gathering in this process.
class SpreadPersistClient {
 public:
  explicit SpreadPersistClient(tier::SpreadPersists& local) : local_(&local) {}
  // Each call ends after `longest_call` at most.
  SpreadPersistClient(std::function<std::shared_ptr<grpc::Channel>()> channel,
                      absl::Duration longest_call)
      : channel_(std::move(channel)), longest_call_(longest_call) {}

  absl::StatusOr<v1::SpreadPersistDir> Open(const v1::SpreadPersistOpen& request);
  absl::StatusOr<v1::SpreadPersistResult> Report(const v1::SpreadPersistCopied& request);
  // Ends the calls in flight and fails later ones at once (shutdown).
  void Close();

 private:
  // Registers a call's context for Close; false once closed.
  bool Begin(grpc::ClientContext* context);
  void End(grpc::ClientContext* context);
  // The coordinator's stub now; null while none leads.
  std::unique_ptr<v1::SpreadPersistService::Stub> Stub() const;

  tier::SpreadPersists* const local_ = nullptr;
  const std::function<std::shared_ptr<grpc::Channel>()> channel_;
  const absl::Duration longest_call_ = absl::ZeroDuration();
  std::atomic<bool> closed_{false};
  absl::Mutex mu_;
  std::set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_SPREAD_PERSIST_SERVICE_H_
