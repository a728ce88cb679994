#include "daemon/service/spread_persist_service.h"

#include "absl/time/clock.h"
#include "daemon/cluster/host_calls.h"
#include "proto/lib/grpc_status.h"

namespace ckpt::service {
namespace {

constexpr char kClosed[] = "ckptd is shutting down";
constexpr char kNoLeader[] = "no coordinator leads (etcd names none, or cannot be reached)";

}  // namespace

grpc::Status SpreadPersistServiceImpl::OpenPersist(grpc::ServerContext* context,
                                                   const v1::SpreadPersistOpen* request,
                                                   v1::SpreadPersistDir* response) {
  if (absl::Status s = cluster::AdmitHost(auth_, cluster_, *context, request->host()); !s.ok())
    return cluster::Refuse(s);
  absl::StatusOr<v1::SpreadPersistDir> dir =
      persists_.Open(*request, cluster::CallerGoneOf(context));
  if (!dir.ok()) return cluster::Refuse(dir.status());
  *response = std::move(*dir);
  return grpc::Status::OK;
}

grpc::Status SpreadPersistServiceImpl::ReportPersistCopied(grpc::ServerContext* context,
                                                           const v1::SpreadPersistCopied* request,
                                                           v1::SpreadPersistResult* response) {
  if (absl::Status s = cluster::AdmitHost(auth_, cluster_, *context, request->host()); !s.ok())
    return cluster::Refuse(s);
  absl::StatusOr<v1::SpreadPersistResult> result =
      persists_.Report(*request, cluster::CallerGoneOf(context));
  if (!result.ok()) return cluster::Refuse(result.status());
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

std::unique_ptr<v1::SpreadPersistService::Stub> SpreadPersistClient::Stub() const {
  std::shared_ptr<grpc::Channel> channel = channel_();
  if (channel == nullptr) return nullptr;
  return v1::SpreadPersistService::NewStub(std::move(channel));
}

absl::StatusOr<v1::SpreadPersistDir> SpreadPersistClient::Open(
    const v1::SpreadPersistOpen& request) {
  if (local_ != nullptr) {
    if (closed_.load()) return absl::UnavailableError(kClosed);
    return local_->Open(request, [this] { return closed_.load(); });
  }
  std::unique_ptr<v1::SpreadPersistService::Stub> stub = Stub();
  if (stub == nullptr) return absl::UnavailableError(kNoLeader);
  grpc::ClientContext context;
  if (!Begin(&context)) return absl::UnavailableError(kClosed);
  v1::SpreadPersistDir dir;
  const grpc::Status status = stub->OpenPersist(&context, request, &dir);
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
  std::unique_ptr<v1::SpreadPersistService::Stub> stub = Stub();
  if (stub == nullptr) return absl::UnavailableError(kNoLeader);
  grpc::ClientContext context;
  if (!Begin(&context)) return absl::UnavailableError(kClosed);
  v1::SpreadPersistResult result;
  const grpc::Status status = stub->ReportPersistCopied(&context, request, &result);
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
