#include "daemon/cluster/coordinator_service.h"

#include "absl/strings/str_cat.h"
#include "proto/lib/grpc_status.h"
#include "proto/lib/validation.h"

namespace ckpt::cluster {
namespace {

// An abort's reason is kept with the failed save for the other hosts:
// bounded, whatever a caller sends.
constexpr size_t kMaxReasonBytes = 1024;

}  // namespace

absl::Status CoordinatorServiceImpl::Admit(const grpc::ServerContext& context,
                                           const v1::HostIdentity& host) const {
  absl::StatusOr<auth::Caller> caller = auth_.Authorize(context, auth::Permission::kAdmin);
  if (!caller.ok()) return caller.status();
  if (absl::Status s = ValidateName("host", host.host()); !s.ok()) return s;
  if (!cluster_.HostLive(host.host())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "host ", host.host(),
        " is not registered with this coordinator, or is lost: its ckptd must run with "
        "--coordinator_address pointing here and heartbeat"));
  }
  return absl::OkStatus();
}

grpc::Status CoordinatorServiceImpl::PlanSave(grpc::ServerContext* context,
                                              const v1::NodeSavePlan* request,
                                              v1::SaveAssignment* response) {
  if (absl::Status s = Admit(*context, request->host()); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<v1::SaveAssignment> assignment =
      coordinator_.PlanSave(*request, [context] { return context->IsCancelled(); });
  if (!assignment.ok()) return ToGrpcStatus(assignment.status());
  *response = std::move(*assignment);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::ReportPersisted(grpc::ServerContext* context,
                                                     const v1::NodePersistReport* request,
                                                     v1::CommitResult* response) {
  if (absl::Status s = Admit(*context, request->host()); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<v1::CommitResult> result =
      coordinator_.ReportPersisted(*request, [context] { return context->IsCancelled(); });
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

grpc::Status CoordinatorServiceImpl::AbortSave(grpc::ServerContext* context,
                                               const v1::AbortSaveRequest* request,
                                               v1::AbortSaveResponse*) {
  // A lost host may still abort: its saves fail either way.
  absl::StatusOr<auth::Caller> caller = auth_.Authorize(*context, auth::Permission::kAdmin);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  v1::AbortSaveRequest bounded = *request;
  if (bounded.reason().size() > kMaxReasonBytes) bounded.mutable_reason()->resize(kMaxReasonBytes);
  coordinator_.AbortSave(bounded);
  return grpc::Status::OK;
}

}  // namespace ckpt::cluster
