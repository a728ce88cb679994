#include "daemon/cluster/host_calls.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "proto/lib/grpc_status.h"
#include "proto/lib/validation.h"

namespace ckpt::cluster {

absl::Status AdmitHost(const auth::Authenticator& auth, const ClusterServiceImpl& cluster,
                       const grpc::ServerContext& context, const v1::HostIdentity& host) {
  absl::StatusOr<auth::Caller> caller = auth.Authorize(context, auth::Permission::kAdmin);
  if (!caller.ok()) return caller.status();
  if (absl::Status s = ValidateName("host", host.host()); !s.ok()) return s;
  // A standby (or deposed) coordinator serves no node: the message names
  // the leader, so the node's error does too.
  if (absl::Status s = cluster.CheckLeading(); !s.ok()) return s;
  if (!cluster.HostLive(host.host())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "host ", host.host(),
        " is not registered with this coordinator, or is lost: its ckptd must run with "
        "--coordinator_address pointing here and heartbeat"));
  }
  return absl::OkStatus();
}

coordinator::CallerGone CallerGoneOf(const grpc::ServerContext* context) {
  return [context] {
    return context->IsCancelled() || std::chrono::system_clock::now() > context->deadline();
  };
}

grpc::Status Refuse(const absl::Status& status) {
  constexpr size_t kMaxMessage = 4096;
  if (status.message().size() <= kMaxMessage) return ToGrpcStatus(status);
  return ToGrpcStatus(
      absl::Status(status.code(), absl::StrCat(status.message().substr(0, kMaxMessage), "...")));
}

}  // namespace ckpt::cluster
