#include "daemon/cluster/coordinator_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/lib/grpc_status.h"

namespace ckpt::cluster {

class RemoteCoordinatorClient::Call {
 public:
  Call(RemoteCoordinatorClient& owner, absl::Duration timeout) : owner_(owner) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    absl::MutexLock lock(&owner_.mu_);
    owner_.calls_.insert(this);
    // Cancelled before it starts: the call fails at once.
    if (!owner_.closed_.empty()) Cancel(owner_.closed_);
  }
  ~Call() {
    absl::MutexLock lock(&owner_.mu_);
    owner_.calls_.erase(this);
  }
  // From the owner, holding its mu_ (which keeps this call registered).
  void Cancel(const std::string& reason) {
    absl::MutexLock lock(&mu_);
    reason_ = reason;
    context.TryCancel();
  }
  std::string reason() const {
    absl::MutexLock lock(&mu_);
    return reason_;
  }

  grpc::ClientContext context;

 private:
  RemoteCoordinatorClient& owner_;
  mutable absl::Mutex mu_;  // after the owner's
  std::string reason_ ABSL_GUARDED_BY(mu_);
};

RemoteCoordinatorClient::RemoteCoordinatorClient(Target target, absl::Duration longest_call,
                                                 std::function<bool()> registered,
                                                 absl::Duration registration_wait)
    : target_(std::move(target)),
      longest_call_(longest_call),
      registered_(std::move(registered)),
      registration_wait_(registration_wait) {}

absl::Status RemoteCoordinatorClient::Finish(const grpc::Status& status, const Call& call,
                                             const char* what) const {
  if (status.ok()) return absl::OkStatus();
  const std::string cancelled = call.reason();
  if (!cancelled.empty()) return absl::UnavailableError(cancelled);
  const absl::Status s = FromGrpcStatus(status);
  return absl::Status(
      s.code(), absl::StrCat("coordinator ", target_.address(), " (", what, "): ", s.message()));
}

absl::StatusOr<std::unique_ptr<v1::CoordinatorService::Stub>> RemoteCoordinatorClient::Stub()
    const {
  std::shared_ptr<grpc::Channel> channel = target_.channel();
  if (channel == nullptr) {
    return absl::UnavailableError(
        "no coordinator leads (etcd names none, or cannot be reached): try again once one is "
        "elected");
  }
  return v1::CoordinatorService::NewStub(std::move(channel));
}

void RemoteCoordinatorClient::AwaitRegistered() const {
  // Polled: registration is the link's business, and rare.
  const absl::Time until = absl::Now() + registration_wait_;
  while (!registered_() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
}

bool RemoteCoordinatorClient::RetryUnderNewLeader(const absl::Status& error, uint64_t seen) const {
  if (!target_.await_new_leader || !absl::IsUnavailable(error)) return false;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.empty()) return false;  // shutting down
  }
  return target_.await_new_leader(seen, target_.failover_wait);
}

absl::StatusOr<v1::SaveAssignment> RemoteCoordinatorClient::PlanSave(const v1::NodeSavePlan& plan) {
  // A leader change while planning: asked again of the next leader (twice
  // at most; each waits for a new one).
  constexpr int kAttempts = 3;
  absl::StatusOr<v1::SaveAssignment> assignment;
  for (int attempt = 1;; ++attempt) {
    const uint64_t seen = target_.generation ? target_.generation() : 0;
    assignment = PlanSaveOnce(plan);
    if (assignment.ok() || attempt == kAttempts ||
        !RetryUnderNewLeader(assignment.status(), seen)) {
      break;
    }
  }
  return assignment;
}

absl::StatusOr<v1::SaveAssignment> RemoteCoordinatorClient::PlanSaveOnce(
    const v1::NodeSavePlan& plan) {
  AwaitRegistered();
  absl::StatusOr<std::unique_ptr<v1::CoordinatorService::Stub>> stub = Stub();
  if (!stub.ok()) return stub.status();
  Call call(*this, longest_call_);
  v1::SaveAssignment assignment;
  const grpc::Status status = (*stub)->PlanSave(&call.context, plan, &assignment);
  if (absl::Status s = Finish(status, call, "planning"); !s.ok()) return s;
  if (target_.min_epoch && assignment.epoch() < target_.min_epoch()) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordinator ", target_.address(), " planned the save under leader epoch ",
                     assignment.epoch(), ", below epoch ", target_.min_epoch(),
                     " (it was deposed): not written"));
  }
  return assignment;
}

absl::StatusOr<v1::LoadAssignment> RemoteCoordinatorClient::PlanLoad(const v1::NodeLoadPlan& plan) {
  AwaitRegistered();
  absl::StatusOr<std::unique_ptr<v1::CoordinatorService::Stub>> stub = Stub();
  if (!stub.ok()) return stub.status();
  Call call(*this, longest_call_);
  v1::LoadAssignment assignment;
  const grpc::Status status = (*stub)->PlanLoad(&call.context, plan, &assignment);
  if (absl::Status s = Finish(status, call, "planning the load"); !s.ok()) return s;
  return assignment;
}

absl::StatusOr<v1::CommitResult> RemoteCoordinatorClient::ReportPersisted(
    const v1::NodePersistReport& report) {
  absl::StatusOr<std::unique_ptr<v1::CoordinatorService::Stub>> stub = Stub();
  if (!stub.ok()) return stub.status();
  Call call(*this, longest_call_);
  v1::CommitResult result;
  const grpc::Status status = (*stub)->ReportPersisted(&call.context, report, &result);
  if (absl::Status s = Finish(status, call, "commit"); !s.ok()) return s;
  return result;
}

void RemoteCoordinatorClient::AbortSave(const v1::AbortSaveRequest& request) {
  // Not waited for: a failing save's clean-up must not hang on a
  // coordinator that is gone or cut off (it learns of the loss by itself).
  struct Pending {
    grpc::ClientContext context;
    v1::AbortSaveRequest request;
    v1::AbortSaveResponse response;
  };
  absl::StatusOr<std::unique_ptr<v1::CoordinatorService::Stub>> stub = Stub();
  if (!stub.ok()) return;  // none leads: no save of it lives on
  auto* pending = new Pending;
  pending->request = request;
  pending->context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  (*stub)->async()->AbortSave(&pending->context, &pending->request, &pending->response,
                              [pending](const grpc::Status&) { delete pending; });
}

void RemoteCoordinatorClient::Close(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  closed_ = reason.empty() ? "closed" : reason;
  for (Call* call : calls_) call->Cancel(closed_);
}

void RemoteCoordinatorClient::CancelAll(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  for (Call* call : calls_) call->Cancel(reason);
}

}  // namespace ckpt::cluster
