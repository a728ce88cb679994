// ckpt.v1.NodeService: what local ranks and ckptctl talk to. Handlers only
// find the right save or load session and translate statuses; the work is
// in SaveSession, LoadSession and the coordinator.
//
// Liveness: each attached rank holds a Watch stream (a callback reactor, so
// no thread waits on it). When the stream is cancelled, because the rank's
// process died or its connection broke, the rank is gone: its saves that
// still needed it and its loads fail on every other rank at once, naming
// it, and its session and GPU mappings are released.
//
// Thread-safety: gRPC calls handlers from many threads; all state is
// guarded by mu_ or owned by the sessions.
#ifndef CKPT_DAEMON_SERVICE_NODE_SERVICE_H_
#define CKPT_DAEMON_SERVICE_NODE_SERVICE_H_

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ckpt/v1/cluster.pb.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "daemon/session/load_session.h"
#include "daemon/session/node_context.h"
#include "daemon/session/save_session.h"
#include "proto/lib/request_limits.h"

namespace ckpt::service {

class WatchReactor;

class NodeService final
    : public v1::NodeService::WithCallbackMethod_Watch<v1::NodeService::Service> {
 public:
  NodeService(session::NodeContext& context, bool gpu_available, RequestLimits limits = {});
  ~NodeService() override;

  // Fails sessions whose deadlines passed and forgets finished ones. The
  // daemon calls it periodically.
  void Reap(absl::Time now);
  // Fails every save and load in flight and ends every Watch (shutdown).
  void AbortAll(const absl::Status& status);
  // Saves and loads still in flight.
  int InFlight();
  // The progress of up to `max` of each, for the coordinator's view.
  void InFlightProgress(int max, google::protobuf::RepeatedPtrField<v1::SaveProgress>* saves,
                        google::protobuf::RepeatedPtrField<v1::LoadProgress>* loads);
  // The rank behind the session is gone (its Watch ended).
  void RankGone(const session::RankSession& rank);

  // Saves of jobs spread over hosts, for the coordinator link: the ids of
  // those in flight (its heartbeat lists them) ...
  std::vector<std::string> SpanningSaveIds();
  // ... those the coordinator says failed (another host was lost, or it
  // restarted and forgot them), with its reason, and the loads spread over
  // a host it lost ...
  void FailSpanningSaves(const v1::HeartbeatResponse& answer);
  // ... and all of them, and the loads spread over hosts, when this host
  // lost contact with the coordinator. planned_only: saves still waiting
  // for their plan are left alone (a new leader was elected: their plan
  // is asked of it, RemoteCoordinatorClient).
  void FailSpanningSaves(const absl::Status& status, bool planned_only = false);

  grpc::Status Attach(grpc::ServerContext*, const v1::AttachRequest*, v1::AttachResponse*) override;
  grpc::Status Detach(grpc::ServerContext*, const v1::DetachRequest*, v1::DetachResponse*) override;
  grpc::ServerWriteReactor<v1::WatchEvent>* Watch(grpc::CallbackServerContext* context,
                                                  const v1::WatchRequest* request) override;
  grpc::Status PlanSave(grpc::ServerContext*, const v1::PlanSaveRequest*,
                        v1::PlanSaveResponse*) override;
  grpc::Status NextSaveBatch(grpc::ServerContext*, const v1::NextSaveBatchRequest*,
                             v1::SaveBatch*) override;
  grpc::Status SubmitSnapshot(grpc::ServerContext*, const v1::SubmitSnapshotRequest*,
                              v1::SubmitSnapshotResponse*) override;
  grpc::Status WaitSave(grpc::ServerContext*, const v1::WaitSaveRequest*,
                        v1::WaitSaveResponse*) override;
  grpc::Status Load(grpc::ServerContext*, const v1::LoadRequest*, v1::LoadResponse*) override;
  grpc::Status NextLoadBatch(grpc::ServerContext*, const v1::NextLoadBatchRequest*,
                             v1::LoadBatch*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::GetStatusResponse*) override;
  grpc::Status ListCheckpoints(grpc::ServerContext*, const v1::ListCheckpointsRequest*,
                               v1::ListCheckpointsResponse*) override;
  grpc::Status InspectCheckpoint(grpc::ServerContext*, const v1::InspectCheckpointRequest*,
                                 v1::InspectCheckpointResponse*) override;
  grpc::Status VerifyCheckpoint(grpc::ServerContext*, const v1::VerifyCheckpointRequest*,
                                v1::VerifyCheckpointResponse*) override;
  grpc::Status CancelSave(grpc::ServerContext*, const v1::CancelSaveRequest*,
                          v1::CancelSaveResponse*) override;
  grpc::Status CollectGarbage(grpc::ServerContext*, const v1::CollectGarbageRequest*,
                              v1::CollectGarbageResponse*) override;
  grpc::Status AdoptJob(grpc::ServerContext*, const v1::AdoptJobRequest*,
                        v1::AdoptJobResponse*) override;

 private:
  // Where a committed step is: each tier that holds it (the memory tier
  // first), with the step resolved (latest: the newest of either tier).
  // Every store's copy of the step (tier/stores.h), after the job's name
  // is checked.
  absl::StatusOr<std::vector<tier::Stores::Copy>> CopiesOf(const std::string& job, int64_t step);
  friend class WatchReactor;
  using Key = std::pair<std::string, int64_t>;  // (job, step)
  // Admits one more PlanSave or Load of the session into its barrier:
  // RESOURCE_EXHAUSTED past kMaxBarrierCallsPerSession. LeaveBarrier undoes it.
  absl::Status EnterBarrier(const std::string& session_id);
  void LeaveBarrier(const std::string& session_id);
  // The caller, if it holds `needed` (UNAUTHENTICATED or PERMISSION_DENIED
  // naming it otherwise).
  absl::StatusOr<auth::Caller> Authorize(const grpc::ServerContextBase* context,
                                         auth::Permission needed);
  // The session named by a call, if the caller's user attached it: NOT_FOUND
  // for an unknown id, PERMISSION_DENIED for another user's session (ids
  // are not secrets to rely on).
  absl::StatusOr<session::RankSession> CallerSession(const grpc::ServerContextBase* context,
                                                     const std::string& session_id);
  // OK when the caller may act on `job`'s checkpoints: an operator holding
  // `operator_needs`, or the user that owns the job.
  absl::Status AuthorizeJob(const auth::Caller& caller, const std::string& job,
                            auth::Permission operator_needs);
  // Authorize and AuthorizeJob in one, for a call on one job's checkpoints.
  absl::Status AuthorizeForJob(const grpc::ServerContextBase* context, const std::string& job,
                               auth::Permission operator_needs);
  std::shared_ptr<session::SaveSession> FindSave(const std::string& save_id);
  std::shared_ptr<session::LoadSession> FindLoad(const std::string& load_id);

 public:
  // For the segment socket: the memory-tier files load `load_id` of `job`
  // shares with its ranks (LoadSession::MemorySpace). NOT_FOUND for a load
  // that is unknown, over, or another job's.
  absl::StatusOr<pool::OwnerSegments> LoadMemorySpace(const std::string& job,
                                                      const std::string& load_id);

 private:
  // The saves and loads not finished yet (their barriers included).
  void Unfinished(std::vector<std::shared_ptr<session::SaveSession>>& saves,
                  std::vector<std::shared_ptr<session::LoadSession>>& loads)
      ABSL_LOCKS_EXCLUDED(mu_);
  void WatchEnded(WatchReactor* watch);

  session::NodeContext& context_;
  const RequestLimits limits_;
  const bool gpu_available_;
  const absl::Time started_;
  absl::Mutex mu_;
  std::map<Key, std::shared_ptr<session::SaveSession>> saves_ ABSL_GUARDED_BY(mu_);
  // Whose each save in saves_ is, for --principal_max_saves_in_flight.
  std::map<Key, auth::Principal> save_principals_ ABSL_GUARDED_BY(mu_);
  // Recently finished saves, so a late WaitSave still learns the outcome.
  std::deque<std::shared_ptr<session::SaveSession>> finished_saves_ ABSL_GUARDED_BY(mu_);
  // Loads waiting for their ranks (by job and step), then planned ones by id.
  std::map<Key, std::shared_ptr<session::LoadSession>> load_barriers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<session::LoadSession>> loads_ ABSL_GUARDED_BY(mu_);
  std::set<WatchReactor*> watches_ ABSL_GUARDED_BY(mu_);
  // PlanSave and Load calls in progress per session id (EnterBarrier).
  std::map<std::string, int> barrier_calls_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_NODE_SERVICE_H_
