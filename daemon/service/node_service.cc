#include "daemon/service/node_service.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/cluster/host_calls.h"
#include "daemon/coordinator/verify.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/save_planner.h"
#include "daemon/service/cluster_verify.h"
#include "daemon/service/collect_garbage.h"
#include "daemon/service/segment_server.h"
#include "daemon/storage/chunk_reader.h"
#include "daemon/storage/layout.h"
#include "proto/lib/grpc_status.h"
#include "proto/lib/request_limits.h"
#include "proto/lib/status_context.h"
#include "proto/lib/validation.h"

namespace ckpt::service {
namespace {

constexpr char kVersion[] = "0.1.0";
constexpr size_t kFinishedSavesKept = 256;
// PlanSave and Load calls one session may have waiting at once. Each holds
// a gRPC thread and its request until its barrier completes or times out
// (--plan_timeout_s), so without a bound one rank asking for many steps at
// once takes threads and memory without end. A rank takes part in one save
// and one load at a time; the spare lets a retry overlap the call it gave
// up on.
constexpr int kMaxBarrierCallsPerSession = 3;

grpc::Status ToGrpc(const absl::Status& s) { return ToGrpcStatus(s); }

// The reply of a handler whose work ends in a StatusOr of the response.
template <typename Response>
grpc::Status Reply(absl::StatusOr<Response> result, Response* response) {
  if (!result.ok()) return ToGrpc(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

}  // namespace

// One rank's Watch stream. It never writes until shutdown; its end is the
// news. Deleted by gRPC (OnDone) after Finish.
class WatchReactor : public grpc::ServerWriteReactor<v1::WatchEvent> {
 public:
  WatchReactor(NodeService* service, session::RankSession rank)
      : service_(service), rank_(std::move(rank)) {}

  void OnCancel() override {
    // The rank's process died or its connection broke (or it detached).
    service_->RankGone(rank_);
    End(grpc::Status::CANCELLED);
  }
  void OnWriteDone(bool) override { End(grpc::Status::OK); }
  void OnDone() override {
    service_->WatchEnded(this);
    delete this;
  }
  // Shutdown: tell the rank why, then end.
  void Shutdown(const std::string& reason) {
    absl::MutexLock lock(&mu_);
    if (finished_ || writing_) return;
    writing_ = true;
    event_.set_reason(reason);
    StartWrite(&event_);
  }
  const session::RankSession& rank() const { return rank_; }

  // Finishes the stream once, whoever asks first: gRPC aborts the daemon
  // on a second Finish (a refused Watch whose client then went away did
  // that: OnCancel after the refusal's Finish).
  void End(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

 private:
  NodeService* const service_;
  const session::RankSession rank_;
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  v1::WatchEvent event_;
};

NodeService::NodeService(session::NodeContext& context, bool gpu_available, RequestLimits limits)
    : context_(context), limits_(limits), gpu_available_(gpu_available), started_(absl::Now()) {}

NodeService::~NodeService() = default;

absl::StatusOr<auth::Caller> NodeService::Authorize(const grpc::ServerContextBase* context,
                                                    auth::Permission needed) {
  return context_.auth.Authorize(*context, needed);
}

absl::StatusOr<session::RankSession> NodeService::CallerSession(
    const grpc::ServerContextBase* context, const std::string& session_id) {
  absl::StatusOr<auth::Caller> caller = Authorize(context, auth::Permission::kUse);
  if (!caller.ok()) return caller.status();
  absl::StatusOr<session::RankSession> rank = context_.sessions.Find(session_id);
  if (!rank.ok()) return rank.status();
  if (rank->principal != caller->principal) {
    return absl::PermissionDeniedError(
        absl::StrCat("session ", QuoteId(session_id), " of job ", rank->job,
                     " belongs to another principal, not to ", caller->peer));
  }
  return rank;
}

absl::Status NodeService::AuthorizeJob(const auth::Caller& caller, const std::string& job,
                                       auth::Permission operator_needs) {
  if (caller.Has(operator_needs)) return absl::OkStatus();
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  absl::StatusOr<std::optional<auth::Principal>> owner = context_.owners.Owner(job);
  if (!owner.ok()) return owner.status();
  // Its owner acts on it by using ckptd: a credential that lost kUse
  // keeps no hold on the jobs it made.
  if (owner->has_value() && **owner == caller.principal && caller.Has(auth::Permission::kUse)) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      caller.peer, " may not ", operator_needs == auth::Permission::kAdmin ? "change" : "read",
      " job ", job, ": it belongs to ",
      owner->has_value() ? (*owner)->Describe() : std::string("nobody yet"),
      ", and operators need ", auth::PermissionName(operator_needs)));
}

absl::Status NodeService::AuthorizeForJob(const grpc::ServerContextBase* context,
                                          const std::string& job, auth::Permission operator_needs) {
  absl::StatusOr<auth::Caller> caller = Authorize(context, auth::Permission::kNone);
  if (!caller.ok()) return caller.status();
  return AuthorizeJob(*caller, job, operator_needs);
}

grpc::Status NodeService::Attach(grpc::ServerContext* context, const v1::AttachRequest* request,
                                 v1::AttachResponse* response) {
  absl::StatusOr<auth::Caller> caller = Authorize(context, auth::Permission::kUse);
  if (!caller.ok()) return ToGrpc(caller.status());
  if (absl::Status s = ValidateAttachRequest(*request, limits_); !s.ok()) return ToGrpc(s);
  // The first principal to attach a new job owns it; nobody else may join
  // it, and a job with data but no owner waits for an admin (job_owners.h).
  if (absl::Status s = context_.owners.Claim(request->job(), caller->principal); !s.ok()) {
    return ToGrpc(s);
  }
  absl::StatusOr<session::RankSession> session = context_.sessions.Attach(
      request->job(), request->rank(), request->world_size(), request->local_rank(),
      caller->principal, request->local_world_size(), caller->local ? caller->pid : 0);
  if (!session.ok()) {
    context_.owners.Release(request->job());  // a refused attach holds no claim
    return ToGrpc(session.status());
  }
  response->set_session_id(session->id);
  // Its load, if one comes, may find the held step checked
  // (early_step_check.h).
  if (context_.step_checks != nullptr && context_.background != nullptr) {
    const bool spread = context_.coordinator_client != nullptr &&
                        request->world_size() > request->local_world_size();
    context_.step_checks->Begin(request->job(), spread, *context_.background);
  }
  context_.pool.Adopt(request->job());
  response->set_segment_socket(SegmentSocketPath(context_.options.socket_path));
  response->set_pool_bytes(context_.pool.capacity());
  response->set_alignment(static_cast<uint32_t>(context_.pool.alignment()));
  const absl::Duration longest =
      std::max({context_.options.plan_timeout, context_.options.pool_wait_timeout,
                context_.options.wait_slice});
  response->set_max_wait_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(longest)));
  return grpc::Status::OK;
}

grpc::Status NodeService::Detach(grpc::ServerContext* context, const v1::DetachRequest* request,
                                 v1::DetachResponse*) {
  absl::StatusOr<session::RankSession> rank = CallerSession(context, request->session_id());
  if (!rank.ok()) return ToGrpc(rank.status());
  RankGone(*rank);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::WatchEvent>* NodeService::Watch(grpc::CallbackServerContext* context,
                                                             const v1::WatchRequest* request) {
  absl::StatusOr<session::RankSession> rank = CallerSession(context, request->session_id());
  if (!rank.ok()) {
    auto* reactor = new WatchReactor(this, session::RankSession{});
    {
      absl::MutexLock lock(&mu_);
      watches_.insert(reactor);
    }
    reactor->End(ToGrpc(rank.status()));
    return reactor;
  }
  context_.sessions.Watched(rank->id);
  auto* reactor = new WatchReactor(this, *rank);
  bool shutting_down = false;
  {
    absl::MutexLock lock(&mu_);
    watches_.insert(reactor);
    shutting_down = shutting_down_;
  }
  if (shutting_down) reactor->Shutdown("ckptd is shutting down");
  return reactor;
}

void NodeService::WatchEnded(WatchReactor* watch) {
  absl::MutexLock lock(&mu_);
  watches_.erase(watch);
}

void NodeService::RankGone(const session::RankSession& rank) {
  if (rank.id.empty()) return;
  std::vector<std::shared_ptr<session::SaveSession>> saves;
  std::vector<std::shared_ptr<session::LoadSession>> loads;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, save] : saves_) {
      if (key.first == rank.job && save->world_size() == rank.world_size) saves.push_back(save);
    }
    for (const auto& [key, load] : load_barriers_) {
      if (key.first == rank.job) loads.push_back(load);
    }
    for (const auto& [id, load] : loads_) {
      if (load->job() == rank.job) loads.push_back(load);
    }
  }
  // Only if it is still attached: a Detach then the stream's end report once.
  if (!context_.sessions.Detach(rank.id).ok()) return;
  // Its hold on the job's claim goes with it: a job that never saved
  // leaves no owner behind (job_owners.h).
  context_.owners.Release(rank.job);
  for (auto& save : saves) save->RankGone(rank.rank);
  for (auto& load : loads) load->RankGone(rank.rank);
  // Its GPU allocations may be freed once it is gone: close our mappings.
  context_.ipc.ReleaseOwner(rank.id);
}

grpc::Status NodeService::PlanSave(grpc::ServerContext* context, const v1::PlanSaveRequest* request,
                                   v1::PlanSaveResponse* response) {
  absl::StatusOr<session::RankSession> rank = CallerSession(context, request->session_id());
  if (!rank.ok()) return ToGrpc(rank.status());
  // Checked once, here, bounded before anything is allocated for it (the
  // session trusts it): counts, sizes, names, shapes, the step.
  if (absl::Status s = ValidatePlanSaveRequest(*request, limits_); !s.ok()) return ToGrpc(s);
  if (rank->spans_hosts() && context_.coordinator_client == nullptr) {
    return ToGrpc(absl::FailedPreconditionError(absl::StrCat(
        "save of job ", rank->job, " step ", request->step(), ": the job spans hosts (",
        rank->local_world_size, " of its ", rank->world_size,
        " ranks attach here) but this ckptd belongs to no cluster: start it with "
        "--coordinator_address (or --coordinator)")));
  }
  if (request->tier() != v1::SAVE_TIER_DURABLE) {
    if (context_.memory_tier == nullptr) {
      return ToGrpc(absl::FailedPreconditionError(
          absl::StrCat("save of job ", rank->job, " step ", request->step(),
                       " asks for the memory tier, but this ckptd has none: start it with "
                       "--memory_tier_bytes")));
    }
    // memory+durable spread over hosts: every host copies its own files of
    // the step to storage after the memory commit, and the cluster's
    // coordinator commits them as one (tier/spread_persist.h).
  }
  // The job's first save records who owns it.
  if (absl::Status s = context_.owners.Persist(rank->job, rank->principal); !s.ok()) {
    return ToGrpc(s);
  }
  if (absl::Status s = EnterBarrier(rank->id); !s.ok()) return ToGrpc(s);
  absl::Cleanup leave = [&] { LeaveBarrier(rank->id); };
  std::shared_ptr<session::SaveSession> save;
  {
    absl::MutexLock lock(&mu_);
    auto existing = saves_.find({rank->job, request->step()});
    if (existing == saves_.end() || existing->second->finished()) {
      // A new save of this job: within its quota of saves in flight?
      int in_flight = 0;
      for (auto it = saves_.lower_bound({rank->job, INT64_MIN});
           it != saves_.end() && it->first.first == rank->job; ++it) {
        in_flight += it->second->finished() ? 0 : 1;
      }
      const int quota = context_.options.job_max_saves_in_flight;
      if (quota > 0 && in_flight >= quota) {
        return ToGrpc(absl::ResourceExhaustedError(absl::StrCat(
            "job ", rank->job, " has ", in_flight, " saves in flight; its quota is ",
            context_.options.job_max_saves_in_flight, " (--job_max_saves_in_flight): step ",
            request->step(), " must wait for one to finish")));
      }
      // And over all the jobs of its principal: many small jobs of one user
      // must not hold every writer and the pool.
      int principal_in_flight = 0;
      for (const auto& [key, save] : saves_) {
        auto owner = save_principals_.find(key);
        if (!save->finished() && owner != save_principals_.end() &&
            owner->second == rank->principal) {
          ++principal_in_flight;
        }
      }
      const int principal_quota = context_.options.principal_max_saves_in_flight;
      if (principal_quota > 0 && principal_in_flight >= principal_quota) {
        return ToGrpc(absl::ResourceExhaustedError(
            absl::StrCat(rank->principal.Describe(), " has ", principal_in_flight,
                         " saves in flight over its jobs; its limit is ", principal_quota,
                         " (--principal_max_saves_in_flight): step ", request->step(), " of job ",
                         rank->job, " must wait for one to finish")));
      }
    }
    std::shared_ptr<session::SaveSession>& slot = saves_[{rank->job, request->step()}];
    if (slot == nullptr || slot->finished()) {
      if (slot != nullptr) finished_saves_.push_back(slot);
      slot = std::make_shared<session::SaveSession>(context_, rank->job, request->step(),
                                                    rank->world_size, rank->local_world_size,
                                                    request->tier());
      save_principals_[{rank->job, request->step()}] = rank->principal;
    }
    save = slot;
  }
  absl::StatusOr<v1::PlanSaveResponse> planned = save->Plan(*rank, *request);
  return Reply(std::move(planned), response);
}

absl::Status NodeService::EnterBarrier(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  int& calls = barrier_calls_[session_id];
  if (calls >= kMaxBarrierCallsPerSession) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the session already has ", calls,
                     " PlanSave or Load calls waiting; the limit is ", kMaxBarrierCallsPerSession));
  }
  ++calls;
  return absl::OkStatus();
}

void NodeService::LeaveBarrier(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  auto it = barrier_calls_.find(session_id);
  if (it != barrier_calls_.end() && --it->second <= 0) barrier_calls_.erase(it);
}

std::shared_ptr<session::SaveSession> NodeService::FindSave(const std::string& save_id) {
  if (save_id.empty()) return nullptr;  // sessions still planning have none
  absl::MutexLock lock(&mu_);
  for (const auto& [key, save] : saves_) {
    if (save->save_id() == save_id) return save;
  }
  for (const auto& save : finished_saves_) {
    if (save->save_id() == save_id) return save;
  }
  return nullptr;
}

std::shared_ptr<session::LoadSession> NodeService::FindLoad(const std::string& load_id) {
  absl::MutexLock lock(&mu_);
  auto it = loads_.find(load_id);
  return it == loads_.end() ? nullptr : it->second;
}

absl::StatusOr<pool::OwnerSegments> NodeService::LoadMemorySpace(const std::string& job,
                                                                 const std::string& load_id) {
  std::shared_ptr<session::LoadSession> load = FindLoad(load_id);
  if (load == nullptr) {
    return absl::NotFoundError(absl::StrCat("load ", QuoteId(load_id), " is unknown"));
  }
  absl::StatusOr<pool::OwnerSegments> space = load->MemorySpace(job);
  if (absl::IsNotFound(space.status())) {
    return absl::NotFoundError(
        absl::StrCat("load ", QuoteId(load_id), " is unknown or over for job ", job));
  }
  return space;
}

grpc::Status NodeService::NextSaveBatch(grpc::ServerContext* context,
                                        const v1::NextSaveBatchRequest* request,
                                        v1::SaveBatch* response) {
  absl::StatusOr<session::RankSession> rank = CallerSession(context, request->session_id());
  if (!rank.ok()) return ToGrpc(rank.status());
  std::shared_ptr<session::SaveSession> save = FindSave(request->save_id());
  if (save == nullptr) {
    return ToGrpc(
        absl::NotFoundError(absl::StrCat("save ", QuoteId(request->save_id()), " is unknown")));
  }
  absl::StatusOr<v1::SaveBatch> batch = save->NextBatch(*rank);
  return Reply(std::move(batch), response);
}

grpc::Status NodeService::SubmitSnapshot(grpc::ServerContext* context,
                                         const v1::SubmitSnapshotRequest* request,
                                         v1::SubmitSnapshotResponse*) {
  absl::StatusOr<session::RankSession> rank = CallerSession(context, request->session_id());
  if (!rank.ok()) return ToGrpc(rank.status());
  std::shared_ptr<session::SaveSession> save = FindSave(request->save_id());
  if (save == nullptr) {
    return ToGrpc(
        absl::NotFoundError(absl::StrCat("save ", QuoteId(request->save_id()), " is unknown")));
  }
  return ToGrpc(save->SubmitSnapshot(*rank, *request));
}

grpc::Status NodeService::WaitSave(grpc::ServerContext* context, const v1::WaitSaveRequest* request,
                                   v1::WaitSaveResponse* response) {
  absl::StatusOr<session::RankSession> rank = CallerSession(context, request->session_id());
  if (!rank.ok()) return ToGrpc(rank.status());
  std::shared_ptr<session::SaveSession> save = FindSave(request->save_id());
  if (save == nullptr || save->job() != rank->job) {
    return ToGrpc(
        absl::NotFoundError(absl::StrCat("save ", QuoteId(request->save_id()), " is unknown")));
  }
  absl::Duration wait = context_.options.wait_slice;
  if (request->timeout_ms() > 0) {
    wait = std::min(wait, absl::Milliseconds(std::min<uint64_t>(request->timeout_ms(), 1u << 30)));
  }
  absl::StatusOr<v1::WaitSaveResponse> result = save->Wait(wait);
  return Reply(std::move(result), response);
}

grpc::Status NodeService::Load(grpc::ServerContext* context, const v1::LoadRequest* request,
                               v1::LoadResponse* response) {
  absl::StatusOr<session::RankSession> rank = CallerSession(context, request->session_id());
  if (!rank.ok()) return ToGrpc(rank.status());
  // Checked once, here (the session trusts it).
  if (absl::Status s = ValidateLoadRequest(*request, limits_); !s.ok()) return ToGrpc(s);
  if (absl::Status s = EnterBarrier(rank->id); !s.ok()) return ToGrpc(s);
  absl::Cleanup leave = [&] { LeaveBarrier(rank->id); };
  std::shared_ptr<session::LoadSession> load;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<session::LoadSession>& slot = load_barriers_[{rank->job, request->step()}];
    if (slot == nullptr || slot->finished()) {
      slot = std::make_shared<session::LoadSession>(context_, rank->job, request->step(),
                                                    rank->world_size, rank->local_world_size);
    }
    load = slot;
  }
  absl::StatusOr<v1::LoadResponse> loaded = load->Load(*rank, *request);
  {
    // Planned (or failed): the barrier slot is free for the next load.
    absl::MutexLock lock(&mu_);
    auto it = load_barriers_.find({rank->job, request->step()});
    if (it != load_barriers_.end() && it->second == load) load_barriers_.erase(it);
    if (loaded.ok()) loads_[loaded->load_id()] = load;
  }
  return Reply(std::move(loaded), response);
}

grpc::Status NodeService::NextLoadBatch(grpc::ServerContext* context,
                                        const v1::NextLoadBatchRequest* request,
                                        v1::LoadBatch* response) {
  absl::StatusOr<session::RankSession> rank = CallerSession(context, request->session_id());
  if (!rank.ok()) return ToGrpc(rank.status());
  std::shared_ptr<session::LoadSession> load = FindLoad(request->load_id());
  if (load == nullptr) {
    return ToGrpc(
        absl::NotFoundError(absl::StrCat("load ", QuoteId(request->load_id()), " is unknown")));
  }
  absl::StatusOr<v1::LoadBatch> batch =
      load->NextBatch(*rank, request->done_batch_id(), context_.options.wait_slice);
  return Reply(std::move(batch), response);
}

grpc::Status NodeService::GetStatus(grpc::ServerContext* context, const v1::GetStatusRequest*,
                                    v1::GetStatusResponse* response) {
  absl::StatusOr<auth::Caller> caller = Authorize(context, auth::Permission::kNone);
  if (!caller.ok()) return ToGrpc(caller.status());
  // Users see the daemon's totals and their own jobs' saves; operators see all.
  const bool all_jobs = caller->Has(auth::Permission::kRead);
  const pool::PoolStats pool = context_.pool.Stats();
  response->set_version(kVersion);
  response->set_host(context_.host.host());
  response->set_storage_root(context_.coordinator.root());
  response->set_pool_bytes(pool.capacity);
  response->set_pool_used_bytes(pool.used);
  response->set_pool_waiters(pool.waiters);
  response->set_pool_stall_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(pool.total_stall)));
  response->set_gpu_available(gpu_available_);
  response->set_attached_ranks(context_.sessions.attached());
  response->set_storage_bytes_written(context_.bytes_written.load());
  response->set_storage_bytes_read(context_.bytes_read.load());
  response->set_chunk_bytes_read(context_.chunk_bytes_read.load());
  response->set_peer_bytes_sent(context_.peer_bytes_sent.load());
  if (context_.peer != nullptr)
    response->set_peer_bytes_received(context_.peer->Stats().bytes_received);
  response->set_checkpoints_committed(context_.commits.load());
  response->set_memory_bytes_read(context_.memory_bytes_read.load());
  response->set_memory_bytes_in_place(context_.memory_bytes_in_place.load());
  response->set_memory_bytes_checked_early(context_.memory_bytes_checked_early.load());
  if (context_.step_checks != nullptr) {
    response->set_memory_checks_early(context_.step_checks->early_checks_used());
  }
  response->set_load_fallback_chunks(context_.load_fallback_chunks.load());
  if (tier::MemoryTier* memory = context_.memory_tier; memory != nullptr) {
    response->set_memory_tier_budget_bytes(memory->budget_bytes());
    response->set_memory_tier_bytes(memory->bytes_held());
    const tier::PersistCounts persists = memory->persist_counts();
    response->set_memory_persists(persists.persisted);
    response->set_memory_persist_failures(persists.failed);
    for (v1::MemoryTierJob& job : memory->Jobs()) {
      if (all_jobs || AuthorizeJob(*caller, job.job(), auth::Permission::kRead).ok()) {
        *response->add_memory_tier_jobs() = std::move(job);
      }
    }
  }
  response->set_uptime_seconds(absl::ToInt64Seconds(absl::Now() - started_));
  std::vector<std::shared_ptr<session::SaveSession>> saves;
  std::vector<std::shared_ptr<session::LoadSession>> loads;
  Unfinished(saves, loads);
  response->set_loads_in_flight(static_cast<int>(loads.size()));
  // Outside mu_: ownership may be read from storage.
  const auto visible = [&](const std::string& job) {
    return all_jobs || AuthorizeJob(*caller, job, auth::Permission::kRead).ok();
  };
  for (const auto& save : saves) {
    if (visible(save->job())) *response->add_saves() = save->Progress();
  }
  for (const auto& load : loads) {
    if (visible(load->job())) *response->add_loads() = load->Progress();
  }
  for (const metrics::JobCost& cost : context_.metrics.job_costs().All()) {
    if (!visible(cost.job)) continue;
    v1::JobCheckpointCost* out = response->add_job_costs();
    out->set_job(cost.job);
    out->set_saves(cost.saves);
    out->set_snapshot_s(cost.snapshot_s);
    out->set_persist_s(cost.persist_s);
    out->set_interval_s(cost.interval_s);
    out->set_last_commit_unix_ms(absl::ToUnixMillis(cost.last_commit));
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::ListCheckpoints(grpc::ServerContext* context,
                                          const v1::ListCheckpointsRequest* request,
                                          v1::ListCheckpointsResponse* response) {
  if (absl::Status s = AuthorizeForJob(context, request->job(), auth::Permission::kRead); !s.ok()) {
    return ToGrpc(s);
  }
  absl::StatusOr<std::vector<v1::CheckpointSummary>> steps =
      session::StoresOf(context_).List(request->job());
  if (!steps.ok()) return ToGrpc(steps.status());
  for (v1::CheckpointSummary& summary : *steps) *response->add_checkpoints() = std::move(summary);
  return grpc::Status::OK;
}

grpc::Status NodeService::InspectCheckpoint(grpc::ServerContext* context,
                                            const v1::InspectCheckpointRequest* request,
                                            v1::InspectCheckpointResponse* response) {
  if (absl::Status s = AuthorizeForJob(context, request->job(), auth::Permission::kRead); !s.ok()) {
    return ToGrpc(s);
  }
  absl::StatusOr<std::vector<tier::Stores::Copy>> stores =
      CopiesOf(request->job(), request->step());
  if (!stores.ok()) return ToGrpc(stores.status());
  absl::StatusOr<v1::CheckpointManifest> manifest =
      stores->front().catalog->ReadManifest(request->job(), stores->front().step);
  if (!manifest.ok()) return ToGrpc(manifest.status());
  *response->mutable_manifest() = std::move(*manifest);
  return grpc::Status::OK;
}

absl::StatusOr<std::vector<tier::Stores::Copy>> NodeService::CopiesOf(const std::string& job,
                                                                      int64_t step) {
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  return session::StoresOf(context_).CopiesOf(job, step);
}

grpc::Status NodeService::VerifyCheckpoint(grpc::ServerContext* context,
                                           const v1::VerifyCheckpointRequest* request,
                                           v1::VerifyCheckpointResponse* response) {
  absl::StatusOr<auth::Caller> caller = Authorize(context, auth::Permission::kNone);
  if (!caller.ok()) return ToGrpc(caller.status());
  if (absl::Status s = AuthorizeJob(*caller, request->job(), auth::Permission::kRead); !s.ok()) {
    return ToGrpc(s);
  }
  // Every tier that holds the step is checked: a copy in memory can go bad
  // as well as one on disk.
  absl::StatusOr<std::vector<tier::Stores::Copy>> stores =
      CopiesOf(request->job(), request->step());
  if (!stores.ok()) return ToGrpc(stores.status());
  for (const tier::Stores::Copy& store : *stores) {
    // The cluster's coordinator holds the manifests of memory-tier steps
    // spread over hosts; the hosts hold the bytes: each checks its own.
    if (context_.verify_rounds != nullptr && store.backend == &context_.memory_tier->backend()) {
      absl::Status spread =
          VerifySpreadMemoryStep(context_, request->job(), store.step, caller->principal.Describe(),
                                 cluster::CallerGoneOf(context), response);
      if (!spread.ok()) return ToGrpc(spread);
      continue;
    }
    absl::StatusOr<coordinator::VerifyResult> result =
        coordinator::VerifyCheckpoint(*store.backend, *store.catalog, request->job(), store.step);
    if (!result.ok()) {
      return ToGrpc(WithContext(result.status(), absl::StrCat("the ", store.tier, " copy")));
    }
    response->set_chunks_checked(response->chunks_checked() + result->chunks);
    response->set_bytes_checked(response->bytes_checked() + result->bytes);
    if (store.backend == &context_.backend) {
      context_.bytes_read.fetch_add(result->bytes, std::memory_order_relaxed);
    }
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::CancelSave(grpc::ServerContext* context,
                                     const v1::CancelSaveRequest* request,
                                     v1::CancelSaveResponse*) {
  if (absl::Status s = AuthorizeForJob(context, request->job(), auth::Permission::kAdmin);
      !s.ok()) {
    return ToGrpc(s);
  }
  if (absl::Status s = ValidateName("job", request->job()); !s.ok()) return ToGrpc(s);
  std::shared_ptr<session::SaveSession> save;
  {
    absl::MutexLock lock(&mu_);
    auto it = saves_.find({request->job(), request->step()});
    if (it != saves_.end() && !it->second->finished()) save = it->second;
  }
  // The cluster's coordinator cancels a save spread over hosts on every
  // host: those waiting on it fail at once, the others within a heartbeat.
  bool cancelled_cluster = false;
  if (context_.options.coordinator) {
    v1::AbortSaveRequest abort;
    abort.set_job(request->job());
    abort.set_step(request->step());
    abort.set_reason(absl::StrCat("save of job ", request->job(), " step ", request->step(),
                                  " cancelled by operator at the coordinator"));
    cancelled_cluster = context_.coordinator.AbortSave(abort);
  }
  if (save == nullptr && !cancelled_cluster) {
    return ToGrpc(absl::NotFoundError(absl::StrCat("no save of job ", request->job(), " step ",
                                                   request->step(), " is in flight")));
  }
  if (save != nullptr) {
    save->Fail(absl::CancelledError(absl::StrCat("save of job ", request->job(), " step ",
                                                 request->step(), " cancelled by operator")));
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::AdoptJob(grpc::ServerContext* context, const v1::AdoptJobRequest* request,
                                   v1::AdoptJobResponse* response) {
  absl::StatusOr<auth::Caller> caller = Authorize(context, auth::Permission::kAdmin);
  if (!caller.ok()) return ToGrpc(caller.status());
  if (absl::Status s = ValidateName("job", request->job()); !s.ok()) return ToGrpc(s);
  if (request->owner().size() > 256) {
    return ToGrpc(absl::InvalidArgumentError("owner: longer than 256 bytes"));
  }
  absl::StatusOr<auth::Principal> owner = auth::Principal::FromOwnerSpec(request->owner());
  if (!owner.ok()) return ToGrpc(WithContext(owner.status(), "owner"));
  if (request->replace() && context_.sessions.HasJob(request->job())) {
    return ToGrpc(absl::FailedPreconditionError(
        absl::StrCat("job ", request->job(),
                     " has ranks attached here; hand it over when they "
                     "are gone")));
  }
  absl::StatusOr<std::optional<auth::Principal>> previous =
      context_.owners.Adopt(request->job(), *owner, request->replace());
  if (!previous.ok()) return ToGrpc(previous.status());
  if (previous->has_value()) response->set_previous_owner((*previous)->Key());
  response->set_owner(owner->Key());
  std::fprintf(
      stderr, "ckptd: job %s adopted by %s for %s%s\n", request->job().c_str(),
      caller->peer.c_str(), owner->Describe().c_str(),
      previous->has_value() ? absl::StrCat(" (was ", (*previous)->Describe(), ")").c_str() : "");
  return grpc::Status::OK;
}

grpc::Status NodeService::CollectGarbage(grpc::ServerContext* context,
                                         const v1::CollectGarbageRequest* request,
                                         v1::CollectGarbageResponse* response) {
  // Deleting checkpoints: the job's owner, or an admin operator.
  if (absl::Status s = AuthorizeForJob(context, request->job(), auth::Permission::kAdmin);
      !s.ok()) {
    return ToGrpc(s);
  }
  return Reply(service::CollectGarbage(context_.coordinator, *request), response);
}

void NodeService::Reap(absl::Time now) {
  // Ranks gone without a word: their process exited, or they never opened
  // their Watch stream. Their sessions (and what their saves and loads
  // hold) go now, not when ckptd restarts.
  for (const session::RankSession& gone : context_.sessions.Stale(now)) RankGone(gone);
  std::vector<std::shared_ptr<session::SaveSession>> saves;
  std::vector<std::shared_ptr<session::LoadSession>> loads;
  std::vector<std::shared_ptr<session::LoadSession>> done;  // destroyed outside mu_: joins readers
  {
    absl::MutexLock lock(&mu_);
    for (auto it = saves_.begin(); it != saves_.end();) {
      if (it->second->finished()) {
        finished_saves_.push_back(it->second);
        save_principals_.erase(it->first);
        it = saves_.erase(it);
      } else {
        saves.push_back(it->second);
        ++it;
      }
    }
    while (finished_saves_.size() > kFinishedSavesKept) finished_saves_.pop_front();
    for (auto it = load_barriers_.begin(); it != load_barriers_.end();) {
      if (it->second->finished()) {
        done.push_back(it->second);
        it = load_barriers_.erase(it);
      } else {
        loads.push_back(it->second);
        ++it;
      }
    }
    for (auto it = loads_.begin(); it != loads_.end();) {
      if (it->second->finished()) {
        done.push_back(it->second);
        it = loads_.erase(it);
      } else {
        loads.push_back(it->second);
        ++it;
      }
    }
  }
  for (auto& save : saves) save->CheckDeadlines(now);
  for (auto& load : loads) load->CheckDeadlines(now);
}

std::vector<std::string> NodeService::SpanningSaveIds() {
  std::vector<std::shared_ptr<session::SaveSession>> saves;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, save] : saves_) {
      if (save->spans_hosts()) saves.push_back(save);
    }
  }
  std::vector<std::string> ids;
  for (const auto& save : saves) {
    if (save->finished()) continue;
    std::string id = save->save_id();
    if (!id.empty()) ids.push_back(std::move(id));
  }
  return ids;
}

void NodeService::FailSpanningSaves(const v1::HeartbeatResponse& answer) {
  if (answer.lost_hosts_size() > 0) {
    std::vector<std::shared_ptr<session::LoadSession>> loads;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, load] : loads_) loads.push_back(load);
    }
    for (const auto& load : loads) load->PeersLost(answer.lost_hosts());
  }
  for (const v1::HeartbeatResponse::FailedSave& failed : answer.failed_saves()) {
    std::shared_ptr<session::SaveSession> save = FindSave(failed.save_id());
    if (save == nullptr) continue;
    save->Fail(absl::AbortedError(
        absl::StrCat("save of job ", save->job(), " step ", save->step(),
                     ": the coordinator failed it: ", failed.reason().substr(0, 1024))));
  }
}

void NodeService::FailSpanningSaves(const absl::Status& status, bool planned_only) {
  std::vector<std::shared_ptr<session::SaveSession>> saves;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, save] : saves_) {
      if (!save->spans_hosts() || save->finished()) continue;
      if (planned_only && save->save_id().empty()) continue;
      saves.push_back(save);
    }
  }
  for (const auto& save : saves) {
    save->Fail(absl::Status(status.code(), absl::StrCat("save of job ", save->job(), " step ",
                                                        save->step(), ": ", status.message())));
  }
  // Loads spread over hosts wait for the coordinator's plan or exchange
  // with peers the coordinator assigned: as lost as the saves.
  std::vector<std::shared_ptr<session::LoadSession>> loads;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, load] : loads_) {
      if (load->spans_hosts()) loads.push_back(load);
    }
    // Those still gathering their ranks or waiting for the plan too.
    for (const auto& [key, load] : load_barriers_) {
      if (load->spans_hosts()) loads.push_back(load);
    }
  }
  for (const auto& load : loads) {
    load->Fail(absl::Status(status.code(),
                            absl::StrCat("load of job ", load->job(), ": ", status.message())));
  }
}

void NodeService::Unfinished(std::vector<std::shared_ptr<session::SaveSession>>& saves,
                             std::vector<std::shared_ptr<session::LoadSession>>& loads) {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, save] : saves_) {
    if (!save->finished()) saves.push_back(save);
  }
  for (const auto& [key, load] : load_barriers_) {
    if (!load->finished()) loads.push_back(load);
  }
  for (const auto& [id, load] : loads_) {
    if (!load->finished()) loads.push_back(load);
  }
}

void NodeService::InFlightProgress(int max,
                                   google::protobuf::RepeatedPtrField<v1::SaveProgress>* saves,
                                   google::protobuf::RepeatedPtrField<v1::LoadProgress>* loads) {
  std::vector<std::shared_ptr<session::SaveSession>> save_sessions;
  std::vector<std::shared_ptr<session::LoadSession>> load_sessions;
  Unfinished(save_sessions, load_sessions);  // progress is read outside mu_
  for (const auto& save : save_sessions) {
    if (saves->size() == max) break;
    *saves->Add() = save->Progress();
  }
  for (const auto& load : load_sessions) {
    if (loads->size() == max) break;
    *loads->Add() = load->Progress();
  }
}

int NodeService::InFlight() {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [key, save] : saves_) n += save->finished() ? 0 : 1;
  for (const auto& [id, load] : loads_) n += load->finished() ? 0 : 1;
  return n;
}

void NodeService::AbortAll(const absl::Status& status) {
  std::vector<std::shared_ptr<session::SaveSession>> saves;
  std::vector<std::shared_ptr<session::LoadSession>> loads;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [key, save] : saves_) saves.push_back(save);
    for (auto& [key, load] : load_barriers_) loads.push_back(load);
    for (auto& [id, load] : loads_) loads.push_back(load);
    for (WatchReactor* watch : watches_) watch->Shutdown(std::string(status.message()));
  }
  for (auto& save : saves) save->Fail(status);
  for (auto& load : loads) load->Fail(status);
}

}  // namespace ckpt::service
