#include "daemon/cluster/coordinator_service.h"

#include "absl/strings/str_cat.h"
#include "daemon/cluster/host_calls.h"
#include "proto/lib/grpc_status.h"

namespace ckpt::cluster {
namespace {

// An abort's reason is kept with the failed save for the other hosts:
// bounded, whatever a caller sends.
constexpr size_t kMaxReasonBytes = 1024;

}  // namespace

grpc::Status CoordinatorServiceImpl::ReportVerify(grpc::ServerContext* context,
                                                  const v1::HostVerifyReport* request,
                                                  v1::ReportVerifyResponse*) {
  if (absl::Status s = AdmitHost(auth_, cluster_, *context, request->host()); !s.ok())
    return Refuse(s);
  if (verify_rounds_ == nullptr) {
    return Refuse(absl::FailedPreconditionError("this coordinator runs no verifies"));
  }
  return Refuse(verify_rounds_->Report(*request));
}

absl::StatusOr<coordinator::Coordinator*> CoordinatorServiceImpl::Store(v1::SaveTier tier) const {
  if (!v1::SaveTier_IsValid(tier)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown save tier ", static_cast<int>(tier)));
  }
  if (tier == v1::SAVE_TIER_DURABLE) return &coordinator_;
  if (memory_ == nullptr) {
    return absl::FailedPreconditionError(
        "the save asks for the memory tier, but the coordinator has none: start its ckptd with "
        "--memory_tier_bytes");
  }
  return memory_;
}

std::shared_ptr<void> CoordinatorServiceImpl::StartPlanning(const std::string& job, int64_t step,
                                                            bool memory) {
  {
    absl::MutexLock lock(&planning_mu_);
    Planning& p = planning_[{job, step}];
    ++(memory ? p.memory : p.durable);
  }
  return std::shared_ptr<void>(nullptr, [this, job, step, memory](void*) {
    absl::MutexLock lock(&planning_mu_);
    auto it = planning_.find({job, step});
    if (it == planning_.end()) return;
    --(memory ? it->second.memory : it->second.durable);
    if (it->second.memory == 0 && it->second.durable == 0) planning_.erase(it);
  });
}

bool CoordinatorServiceImpl::OtherTierPlanning(const std::string& job, int64_t step,
                                               bool memory) const {
  absl::MutexLock lock(&planning_mu_);
  if (auto d = disagreed_.find({job, step}); d != disagreed_.end() && absl::Now() < d->second) {
    return true;
  }
  auto it = planning_.find({job, step});
  return it != planning_.end() && (memory ? it->second.durable : it->second.memory) > 0;
}

void CoordinatorServiceImpl::MarkDisagreed(const std::string& job, int64_t step) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&planning_mu_);
  // Expired ones go first: the map holds only the last few seconds' worth.
  for (auto it = disagreed_.begin(); it != disagreed_.end();) {
    it = now >= it->second ? disagreed_.erase(it) : std::next(it);
  }
  disagreed_[{job, step}] = now + kDisagreementKept;
}

grpc::Status CoordinatorServiceImpl::PlanSave(grpc::ServerContext* context,
                                              const v1::NodeSavePlan* request,
                                              v1::SaveAssignment* response) {
  if (absl::Status s = AdmitHost(auth_, cluster_, *context, request->host()); !s.ok())
    return Refuse(s);
  absl::StatusOr<coordinator::Coordinator*> store = Store(request->tier());
  if (!store.ok()) return Refuse(store.status());
  // The tiers meet in different stores: hosts that disagree would each
  // wait for the others until the plan timeout, naming the wrong cause.
  coordinator::Coordinator* other = *store == &coordinator_ ? memory_ : &coordinator_;
  const bool memory = *store != &coordinator_;
  std::shared_ptr<void> planning;
  if (other != nullptr) planning = StartPlanning(request->job(), request->step(), memory);
  bool disagreed = other != nullptr && (other->SaveInFlight(request->job(), request->step()) ||
                                        OtherTierPlanning(request->job(), request->step(), memory));
  auto disagreement = [&] {
    return absl::FailedPreconditionError(absl::StrCat(
        "host ", request->host().host().substr(0, 256), " saves step ", request->step(), " of job ",
        request->job().substr(0, 256), " to the ",
        request->tier() == v1::SAVE_TIER_DURABLE ? "durable" : "memory",
        " tier, but other hosts of the save asked for another tier: every rank must ask for "
        "the same"));
  };
  if (disagreed) {
    MarkDisagreed(request->job(), request->step());
    v1::AbortSaveRequest abort;
    abort.set_job(request->job());
    abort.set_step(request->step());
    *abort.mutable_host() = request->host();
    abort.set_reason(std::string(disagreement().message()));
    other->AbortSave(abort);
    return Refuse(disagreement());
  }
  // Waiting, this host gives up once a host of the same save plans in the
  // other tier (checked every 200 ms): that one gives up too.
  coordinator::CallerGone gone = CallerGoneOf(context);
  if (other != nullptr) {
    gone = [this, gone, &disagreed, job = request->job(), step = request->step(), memory] {
      if (gone()) return true;
      disagreed = disagreed || OtherTierPlanning(job, step, memory);
      return disagreed;
    };
  }
  absl::StatusOr<v1::SaveAssignment> assignment = (*store)->PlanSave(*request, gone);
  if (!assignment.ok() && disagreed) {
    MarkDisagreed(request->job(), request->step());
    return Refuse(disagreement());
  }
  if (!assignment.ok()) return Refuse(assignment.status());
  // Planned under this term: a leader deposed meanwhile gives no plan.
  if (absl::Status s = cluster_.CheckLeading(); !s.ok()) return Refuse(s);
  *response = std::move(*assignment);
  response->set_epoch(cluster_.epoch());
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::ReportPersisted(grpc::ServerContext* context,
                                                     const v1::NodePersistReport* request,
                                                     v1::CommitResult* response) {
  if (absl::Status s = AdmitHost(auth_, cluster_, *context, request->host()); !s.ok())
    return Refuse(s);
  absl::StatusOr<coordinator::Coordinator*> store = Store(request->tier());
  if (!store.ok()) return Refuse(store.status());
  absl::StatusOr<v1::CommitResult> result =
      (*store)->ReportPersisted(*request, CallerGoneOf(context));
  if (!result.ok()) return Refuse(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::PlanLoad(grpc::ServerContext* context,
                                              const v1::NodeLoadPlan* request,
                                              v1::LoadAssignment* response) {
  if (absl::Status s = AdmitHost(auth_, cluster_, *context, request->host()); !s.ok())
    return Refuse(s);
  absl::StatusOr<v1::LoadAssignment> assignment =
      coordinator_.PlanSpanningLoad(*request, CallerGoneOf(context));
  if (!assignment.ok()) return Refuse(assignment.status());
  *response = std::move(*assignment);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::AbortSave(grpc::ServerContext* context,
                                               const v1::AbortSaveRequest* request,
                                               v1::AbortSaveResponse*) {
  // A lost host may still abort: its saves fail either way.
  absl::StatusOr<auth::Caller> caller = auth_.Authorize(*context, auth::Permission::kAdmin);
  if (!caller.ok()) return Refuse(caller.status());
  absl::StatusOr<coordinator::Coordinator*> store = Store(request->tier());
  if (!store.ok()) return Refuse(store.status());
  if (request->reason().size() <= kMaxReasonBytes) {
    (*store)->AbortSave(*request);
    return grpc::Status::OK;
  }
  v1::AbortSaveRequest bounded = *request;
  bounded.mutable_reason()->resize(kMaxReasonBytes);
  (*store)->AbortSave(bounded);
  return grpc::Status::OK;
}

}  // namespace ckpt::cluster
