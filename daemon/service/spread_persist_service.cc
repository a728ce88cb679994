#include "daemon/service/spread_persist_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/lib/grpc_status.h"
#include "proto/lib/validation.h"

namespace ckpt::service {
namespace {

constexpr char kClosed[] = "ckptd is shutting down";

// A refusal as gRPC carries it, bounded (it travels in metadata).
grpc::Status Refuse(const absl::Status& status) {
  constexpr size_t kMaxMessage = 4096;
  if (status.message().size() <= kMaxMessage) return ToGrpcStatus(status);
  return ToGrpcStatus(
      absl::Status(status.code(), absl::StrCat(status.message().substr(0, kMaxMessage), "...")));
}

coordinator::CallerGone Gone(grpc::ServerContext* context) {
  return [context] {
    return context->IsCancelled() || std::chrono::system_clock::now() > context->deadline();
  };
}

}  // namespace

absl::Status SpreadPersistServiceImpl::Admit(const grpc::ServerContext& context,
                                             const v1::HostIdentity& host) const {
  absl::StatusOr<auth::Caller> caller = auth_.Authorize(context, auth::Permission::kAdmin);
  if (!caller.ok()) return caller.status();
  if (absl::Status s = ValidateName("host", host.host()); !s.ok()) return s;
  if (!cluster_.HostLive(host.host())) {
    return absl::FailedPreconditionError(
        absl::StrCat("host ", host.host(), " is not registered with this coordinator, or is lost"));
  }
  return absl::OkStatus();
}

grpc::Status SpreadPersistServiceImpl::OpenPersist(grpc::ServerContext* context,
                                                   const v1::SpreadPersistOpen* request,
                                                   v1::SpreadPersistDir* response) {
  if (absl::Status s = Admit(*context, request->host()); !s.ok()) return Refuse(s);
  absl::StatusOr<v1::SpreadPersistDir> dir = persists_.Open(*request, Gone(context));
  if (!dir.ok()) return Refuse(dir.status());
  *response = std::move(*dir);
  return grpc::Status::OK;
}

grpc::Status SpreadPersistServiceImpl::ReportPersistCopied(grpc::ServerContext* context,
                                                           const v1::SpreadPersistCopied* request,
                                                           v1::SpreadPersistResult* response) {
  if (absl::Status s = Admit(*context, request->host()); !s.ok()) return Refuse(s);
  absl::StatusOr<v1::SpreadPersistResult> result = persists_.Report(*request, Gone(context));
  if (!result.ok()) return Refuse(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

bool SpreadPersistClient::Begin(grpc::ClientContext* context) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + longest_call_));
  absl::MutexLock lock(&mu_);
  if (closed_.load()) return false;
  calls_.insert(context);
  return true;
}

void SpreadPersistClient::End(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  calls_.erase(context);
}

absl::StatusOr<v1::SpreadPersistDir> SpreadPersistClient::Open(
    const v1::SpreadPersistOpen& request) {
  if (local_ != nullptr) {
    if (closed_.load()) return absl::UnavailableError(kClosed);
    return local_->Open(request, [this] { return closed_.load(); });
  }
  grpc::ClientContext context;
  if (!Begin(&context)) return absl::UnavailableError(kClosed);
  v1::SpreadPersistDir dir;
  const grpc::Status status = stub_->OpenPersist(&context, request, &dir);
  End(&context);
  if (!status.ok()) return FromGrpcStatus(status);
  return dir;
}

absl::StatusOr<v1::SpreadPersistResult> SpreadPersistClient::Report(
    const v1::SpreadPersistCopied& request) {
  if (local_ != nullptr) {
    if (closed_.load()) return absl::UnavailableError(kClosed);
    return local_->Report(request, [this] { return closed_.load(); });
  }
  grpc::ClientContext context;
  if (!Begin(&context)) return absl::UnavailableError(kClosed);
  v1::SpreadPersistResult result;
  const grpc::Status status = stub_->ReportPersistCopied(&context, request, &result);
  End(&context);
  if (!status.ok()) return FromGrpcStatus(status);
  return result;
}

void SpreadPersistClient::Close() {
  absl::MutexLock lock(&mu_);
  closed_.store(true);
  for (grpc::ClientContext* context : calls_) context->TryCancel();
}

}  // namespace ckpt::service
