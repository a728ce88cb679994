// A node daemon's way to the coordinator (docs/design.md §4): where its saves
// are planned and committed and its loads spread over hosts are planned.
// The coordinator in this process (a job on this host alone, or this
// daemon is the cluster's coordinator), or the cluster's coordinator over
// gRPC (--coordinator_address) for a job spread over hosts. Sessions see
// only this interface, so one session serves both.
//
// Thread-safety: implementations are safe from any thread.
#ifndef CKPT_DAEMON_CLUSTER_COORDINATOR_CLIENT_H_
#define CKPT_DAEMON_CLUSTER_COORDINATOR_CLIENT_H_

#include <functional>
#include <memory>
#include <set>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ckpt/v1/coordinator.grpc.pb.h"
#include "daemon/coordinator/coordinator.h"

namespace ckpt::cluster {

class CoordinatorClient {
 public:
  virtual ~CoordinatorClient() = default;
  // Blocks until every host of the job has sent its plan (coordinator.h).
  virtual absl::StatusOr<v1::SaveAssignment> PlanSave(const v1::NodeSavePlan& plan) = 0;
  // Blocks until the save commits on every host, or fails.
  virtual absl::StatusOr<v1::CommitResult> ReportPersisted(const v1::NodePersistReport& report) = 0;
  // Best effort: the coordinator also learns of a lost host by itself.
  virtual void AbortSave(const v1::AbortSaveRequest& request) = 0;
  // A load whose world spans hosts: blocks until every host of the job has
  // sent its plan; this host's part (coordinator.h PlanSpanningLoad).
  virtual absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::NodeLoadPlan& plan) = 0;
};

// The coordinator in this process.
class LocalCoordinatorClient final : public CoordinatorClient {
 public:
  // `stopping`: waits for other hosts end when it turns true (shutdown).
  // `memory`: where memory-tier saves go (the cluster coordinator's memory
  // tier); null: every save goes to `coordinator`.
  explicit LocalCoordinatorClient(coordinator::Coordinator& coordinator,
                                  coordinator::CallerGone stopping = {},
                                  coordinator::Coordinator* memory = nullptr)
      : coordinator_(coordinator), stopping_(std::move(stopping)), memory_(memory) {}
  absl::StatusOr<v1::SaveAssignment> PlanSave(const v1::NodeSavePlan& plan) override {
    return For(plan.tier()).PlanSave(plan, stopping_);
  }
  absl::StatusOr<v1::CommitResult> ReportPersisted(const v1::NodePersistReport& report) override {
    return For(report.tier()).ReportPersisted(report, stopping_);
  }
  void AbortSave(const v1::AbortSaveRequest& request) override {
    For(request.tier()).AbortSave(request);
  }
  absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::NodeLoadPlan& plan) override {
    return coordinator_.PlanSpanningLoad(plan, stopping_);
  }

 private:
  coordinator::Coordinator& For(v1::SaveTier tier) {
    return tier != v1::SAVE_TIER_DURABLE && memory_ != nullptr ? *memory_ : coordinator_;
  }

  coordinator::Coordinator& coordinator_;
  const coordinator::CallerGone stopping_;
  coordinator::Coordinator* const memory_;
};

// The cluster's coordinator over gRPC. Errors name it. Calls wait as long
// as the coordinator keeps them (it fails them itself when a host is lost
// or ranks never come); CancelAll ends them at once when this host loses
// contact with the coordinator (a cut link never closes the connection).
class RemoteCoordinatorClient final : public CoordinatorClient {
 public:
  // Where the coordinator is now (the link's channel and address: they
  // change when a new leader is elected); a null channel while none
  // leads. `registered` says whether this host is registered with the
  // coordinator: a plan waits for that a while (a daemon just restarted,
  // or a new leader elected, registers first) instead of being refused.
  // `min_epoch`: plans from a lower leader epoch are refused (a deposed
  // leader's); null: none are.
  // With a leader elected through etcd, a plan that finds the coordinator
  // gone (or its leader change cancels the call) waits for the next leader
  // (generation, await_new_leader: CoordinatorLink's) for failover_wait and
  // is asked of it: a save planning when the leader died goes on under the
  // new one. Null: no retry (one fixed coordinator).
  struct Target {
    std::function<std::shared_ptr<grpc::Channel>()> channel;
    std::function<std::string()> address;
    std::function<int64_t()> min_epoch;
    std::function<uint64_t()> generation;
    std::function<bool(uint64_t seen, absl::Duration timeout)> await_new_leader;
    absl::Duration failover_wait = absl::ZeroDuration();
  };
  RemoteCoordinatorClient(Target target, absl::Duration longest_call,
                          std::function<bool()> registered, absl::Duration registration_wait);
  absl::StatusOr<v1::SaveAssignment> PlanSave(const v1::NodeSavePlan& plan) override;
  absl::StatusOr<v1::CommitResult> ReportPersisted(const v1::NodePersistReport& report) override;
  void AbortSave(const v1::AbortSaveRequest& request) override;
  absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::NodeLoadPlan& plan) override;
  // Cancels every call in flight; they fail with `reason`.
  void CancelAll(const std::string& reason);
  // The same, and every later call fails at once (shutdown).
  void Close(const std::string& reason);

 private:
  // A call's context, registered for CancelAll while it runs.
  class Call;
  absl::StatusOr<v1::SaveAssignment> PlanSaveOnce(const v1::NodeSavePlan& plan);
  absl::Status Finish(const grpc::Status& status, const Call& call, const char* what) const;
  // The coordinator's stub now; UNAVAILABLE while none leads.
  absl::StatusOr<std::unique_ptr<v1::CoordinatorService::Stub>> Stub() const;
  // A plan waits a while for this host to be registered (see above).
  void AwaitRegistered() const;
  // After a failed plan asked at leader generation `seen`: whether to ask
  // again (the error says the coordinator is gone, and a new leader came
  // within failover_wait).
  bool RetryUnderNewLeader(const absl::Status& error, uint64_t seen) const;

  const Target target_;
  const absl::Duration longest_call_;
  const std::function<bool()> registered_;
  const absl::Duration registration_wait_;
  mutable absl::Mutex mu_;
  std::set<Call*> calls_ ABSL_GUARDED_BY(mu_);
  std::string closed_ ABSL_GUARDED_BY(mu_);  // why, once closed
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_COORDINATOR_CLIENT_H_
