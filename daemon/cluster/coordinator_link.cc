#include "daemon/cluster/coordinator_link.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/auth/bearer_token.h"
#include "daemon/auth/pem_file.h"
#include "proto/lib/grpc_status.h"

namespace ckpt::cluster {
absl::StatusOr<std::unique_ptr<CoordinatorLink>> CoordinatorLink::Start(
    CoordinatorLinkOptions options) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (absl::StartsWith(options.address, "unix:")) {
    credentials = grpc::InsecureChannelCredentials();  // the socket's owner checks us
  } else {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      absl::StatusOr<std::string> ca =
          auth::ReadPemFile(options.tls_ca_file, "--coordinator_tls_ca_file");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    credentials = grpc::SslCredentials(ssl);
    if (options.token_file.empty()) {
      return absl::InvalidArgumentError(
          "--coordinator_address over TCP needs --coordinator_token_file (the coordinator's "
          "admin token)");
    }
    absl::StatusOr<std::string> token =
        auth::ReadTokenFile(options.token_file, "--coordinator_token_file");
    if (!token.ok()) return token.status();
    credentials =
        grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(*token));
  }
  std::unique_ptr<CoordinatorLink> link(new CoordinatorLink(std::move(options)));
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(link->options_.max_message_bytes);
  arguments.SetMaxSendMessageSize(link->options_.max_message_bytes);
  link->channel_ = grpc::CreateCustomChannel(link->options_.address, credentials, arguments);
  link->stub_ = v1::ClusterService::NewStub(link->channel_);
  link->thread_ = std::thread([l = link.get()] { l->Run(); });
  return link;
}

CoordinatorLink::~CoordinatorLink() { Stop(); }

void CoordinatorLink::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

absl::Status CoordinatorLink::RegisterOnce(absl::Duration* interval) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  v1::RegisterHostResponse response;
  grpc::Status status = stub_->Register(&context, options_.self, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  last_contact_ns_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_release);
  if (response.heartbeat_interval_ms() > 0) {
    *interval = std::clamp(absl::Milliseconds(response.heartbeat_interval_ms()),
                           absl::Milliseconds(10), absl::Seconds(60));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> CoordinatorLink::HeartbeatOnce(absl::Duration interval) {
  v1::HeartbeatRequest request;
  request.set_host(options_.self.host().host());
  request.set_instance(options_.self.instance());
  if (options_.sample) options_.sample(request);
  grpc::ClientContext context;
  // A heartbeat stuck longer than two intervals is dropped for the next
  // one: one slow call must not outlast the coordinator's timeout.
  context.set_deadline(absl::ToChronoTime(
      absl::Now() + std::clamp(2 * interval, absl::Milliseconds(100), options_.call_timeout)));
  v1::HeartbeatResponse response;
  grpc::Status status = stub_->Heartbeat(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  last_contact_ns_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_release);
  if (options_.on_answer) options_.on_answer(response);
  return !response.register_again();
}

void CoordinatorLink::Run() {
  absl::Duration interval = absl::Seconds(1);
  std::string last_error;  // logged when it changes, not on every attempt
  auto report = [&](const absl::Status& s) {
    const std::string text = s.ToString();
    if (text == last_error) return;
    last_error = text;
    absl::FPrintF(stderr, "ckptd: coordinator %s: %s; retrying every %s\n", options_.address, text,
                  absl::FormatDuration(interval));
  };
  do {
    if (!registered()) {
      if (absl::Status s = RegisterOnce(&interval); !s.ok()) {
        report(s);
        continue;
      }
      registered_.store(true, std::memory_order_release);
      last_error.clear();
      absl::FPrintF(stderr, "ckptd: registered with coordinator %s as host %s\n", options_.address,
                    options_.self.host().host());
      continue;  // first heartbeat after one interval
    }
    absl::StatusOr<bool> known = HeartbeatOnce(interval);
    if (!known.ok()) {
      report(known.status());
      continue;  // the coordinator may be back: heartbeat again, it says if it forgot us
    }
    if (!*known) {
      registered_.store(false, std::memory_order_release);
      absl::FPrintF(stderr,
                    "ckptd: coordinator %s does not know this host's instance; "
                    "registering again\n",
                    options_.address);
      continue;
    }
    if (!last_error.empty()) {
      absl::FPrintF(stderr, "ckptd: coordinator %s reachable again\n", options_.address);
      last_error.clear();
    }
  } while (!stop_.WaitForNotificationWithTimeout(interval));
}

}  // namespace ckpt::cluster
