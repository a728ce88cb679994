// CoordinatorService (proto/ckpt/v1/coordinator.proto) of a ckptd started
// with --coordinator: node daemons of jobs spread over hosts send one plan
// and one persist report per host and save; the coordinator (coordinator.h)
// meets them there, plans, and commits once every host has reported.
// Only registered, live hosts take part: a host the registry does not hold
// could never be declared lost, and its saves would wait for ever.
//
// Thread-safety: gRPC calls it from any thread.
#ifndef CKPT_DAEMON_CLUSTER_COORDINATOR_SERVICE_H_
#define CKPT_DAEMON_CLUSTER_COORDINATOR_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "ckpt/v1/coordinator.grpc.pb.h"
#include "daemon/auth/caller.h"
#include "daemon/cluster/cluster_service.h"
#include "daemon/coordinator/coordinator.h"

namespace ckpt::cluster {

class CoordinatorServiceImpl final : public v1::CoordinatorService::Service {
 public:
  // `memory`: the coordinator's memory tier, which plans and commits the
  // memory-tier saves of jobs spread over hosts; null without one.
  CoordinatorServiceImpl(const auth::Authenticator& auth, coordinator::Coordinator& coordinator,
                         const ClusterServiceImpl& cluster,
                         coordinator::Coordinator* memory = nullptr)
      : auth_(auth), coordinator_(coordinator), cluster_(cluster), memory_(memory) {}

  grpc::Status PlanSave(grpc::ServerContext* context, const v1::NodeSavePlan* request,
                        v1::SaveAssignment* response) override;
  grpc::Status ReportPersisted(grpc::ServerContext* context, const v1::NodePersistReport* request,
                               v1::CommitResult* response) override;
  grpc::Status AbortSave(grpc::ServerContext* context, const v1::AbortSaveRequest* request,
                         v1::AbortSaveResponse* response) override;
  // Loads whose world spans hosts (coordinator.h PlanSpanningLoad).
  grpc::Status PlanLoad(grpc::ServerContext* context, const v1::NodeLoadPlan* request,
                        v1::LoadAssignment* response) override;
  // A host's answer to a verify order (verify_rounds.h).
  grpc::Status ReportVerify(grpc::ServerContext* context, const v1::HostVerifyReport* request,
                            v1::ReportVerifyResponse* response) override;
  // Where verify reports go; set before serving (null: refused).
  void ServeVerifies(VerifyRounds* rounds) { verify_rounds_ = rounds; }

 private:
  // The store a save's messages go to by its tier; FAILED_PRECONDITION for
  // a memory tier this coordinator lacks.
  absl::StatusOr<coordinator::Coordinator*> Store(v1::SaveTier tier) const;

  // Hosts planning a save now, per job and step, by the store (tier) they
  // wait in. Hosts that disagree on the tier can both pass the check for
  // the other store's save before either save exists; each then sees the
  // other here while it waits. A leaf lock: never held while calling a
  // coordinator (which calls the waiting hosts' checks under its own).
  struct Planning {
    int durable = 0;
    int memory = 0;
  };
  // Registers a host planning in `store`; the returned guard unregisters it.
  std::shared_ptr<void> StartPlanning(const std::string& job, int64_t step, bool memory);
  // Whether a host plans the save in the other store, or the save's tiers
  // were found to disagree lately (MarkDisagreed).
  bool OtherTierPlanning(const std::string& job, int64_t step, bool memory) const;
  // Remembers for kDisagreementKept that the save's hosts disagree: the
  // host that found it gives up at once and its guard goes, so a host
  // whose check comes later (every 200 ms) would no longer see it plan and
  // would wait out the plan timeout.
  void MarkDisagreed(const std::string& job, int64_t step);
  static constexpr absl::Duration kDisagreementKept = absl::Seconds(10);

  const auth::Authenticator& auth_;
  coordinator::Coordinator& coordinator_;
  const ClusterServiceImpl& cluster_;
  coordinator::Coordinator* const memory_;
  VerifyRounds* verify_rounds_ = nullptr;
  mutable absl::Mutex planning_mu_;
  std::map<std::pair<std::string, int64_t>, Planning> planning_ ABSL_GUARDED_BY(planning_mu_);
  // Until when each save's disagreement is remembered.
  std::map<std::pair<std::string, int64_t>, absl::Time> disagreed_ ABSL_GUARDED_BY(planning_mu_);
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_COORDINATOR_SERVICE_H_
