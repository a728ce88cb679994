#include "daemon/cluster/coordinator_link.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/auth/bearer_token.h"
#include "daemon/auth/pem_file.h"
#include "proto/lib/cluster_protocol.h"
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
          "a coordinator over TCP needs --coordinator_token_file (the coordinator's admin "
          "token)");
    }
    absl::StatusOr<std::string> token =
        auth::ReadTokenFile(options.token_file, "--coordinator_token_file");
    if (!token.ok()) return token.status();
    credentials =
        grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(*token));
  }
  std::unique_ptr<CoordinatorLink> link(new CoordinatorLink(std::move(options)));
  link->credentials_ = std::move(credentials);
  {
    absl::MutexLock lock(&link->mu_);
    link->Connect(link->options_.address);
  }
  link->thread_ = std::thread([l = link.get()] { l->Run(); });
  return link;
}

CoordinatorLink::~CoordinatorLink() { Stop(); }

void CoordinatorLink::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  {
    absl::MutexLock lock(&mu_);
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void CoordinatorLink::Connect(const std::string& address) {
  target_.address = address;
  target_.channel = nullptr;
  target_.stub = nullptr;
  if (address.empty()) return;
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options_.max_message_bytes);
  arguments.SetMaxSendMessageSize(options_.max_message_bytes);
  target_.channel = grpc::CreateCustomChannel(address, credentials_, arguments);
  target_.stub = v1::ClusterService::NewStub(target_.channel);
}

CoordinatorLink::Target CoordinatorLink::CurrentTarget() const {
  absl::MutexLock lock(&mu_);
  return target_;
}

std::shared_ptr<grpc::Channel> CoordinatorLink::channel() const { return CurrentTarget().channel; }

std::string CoordinatorLink::address() const {
  absl::MutexLock lock(&mu_);
  return target_.address;
}

uint64_t CoordinatorLink::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

bool CoordinatorLink::AwaitNewLeader(uint64_t seen, absl::Duration timeout) const {
  const absl::Time until = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (generation_ == seen || target_.stub == nullptr) {
    if (stop_.HasBeenNotified() || changed_.WaitWithDeadline(&mu_, until)) {
      return generation_ != seen && target_.stub != nullptr;
    }
  }
  return true;
}

std::string CoordinatorLink::last_refusal() const {
  absl::MutexLock lock(&mu_);
  return last_refusal_;
}

void CoordinatorLink::SawEpoch(int64_t epoch) {
  int64_t seen = highest_epoch_.load(std::memory_order_acquire);
  while (epoch > seen && !highest_epoch_.compare_exchange_weak(seen, epoch)) {
  }
}

void CoordinatorLink::Follow(const std::string& address, int64_t epoch) {
  SawEpoch(epoch);
  absl::MutexLock lock(&mu_);
  if (address == target_.address && target_.channel != nullptr) {
    // The same coordinator, elected again: it forgot its hosts.
    registered_.store(false, std::memory_order_release);
  } else {
    Connect(address);
    registered_.store(false, std::memory_order_release);
  }
  ++generation_;
  changed_.SignalAll();
}

absl::Status CoordinatorLink::CheckEpoch(const Target& target, int64_t epoch) {
  const int64_t highest = highest_epoch();
  if (epoch < highest) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordinator ", target.address, " answered for leader epoch ", epoch,
                     ", below epoch ", highest, " (it was deposed)"));
  }
  // Epochs are learnt from etcd (Follow) only: a coordinator's answer
  // cannot raise the bar for the others.
  return absl::OkStatus();
}

absl::Status CoordinatorLink::RegisterOnce(const Target& target, absl::Duration* interval) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
  v1::RegisterHostRequest request = options_.self;
  request.set_protocol_version(kClusterProtocolVersion);
  if (options_.registering) options_.registering(request);
  v1::RegisterHostResponse response;
  grpc::Status status = target.stub->Register(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  if (absl::Status s = CheckClusterProtocol(
          response.protocol_version(), absl::StrCat("coordinator ", target.address), "this node");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckEpoch(target, response.epoch()); !s.ok()) return s;
  last_contact_ns_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_release);
  if (response.heartbeat_interval_ms() > 0) {
    *interval = std::clamp(absl::Milliseconds(response.heartbeat_interval_ms()),
                           absl::Milliseconds(10), absl::Seconds(60));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> CoordinatorLink::HeartbeatOnce(const Target& target, absl::Duration interval) {
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
  grpc::Status status = target.stub->Heartbeat(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  if (absl::Status s = CheckEpoch(target, response.epoch()); !s.ok()) return s;
  last_contact_ns_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_release);
  if (options_.on_answer) options_.on_answer(response);
  return !response.register_again();
}

void CoordinatorLink::Run() {
  absl::Duration interval = absl::Seconds(1);
  std::string last_error;  // logged when it changes, not on every attempt
  auto report = [&](const Target& target, const absl::Status& s) {
    const std::string text = s.ToString();
    if (text == last_error) return;
    last_error = text;
    absl::FPrintF(stderr, "ckptd: coordinator %s: %s; retrying every %s\n", target.address, text,
                  absl::FormatDuration(interval));
  };
  uint64_t generation = 0;
  while (!stop_.HasBeenNotified()) {
    Target target;
    {
      absl::MutexLock lock(&mu_);
      generation = generation_;
      target = target_;
    }
    if (target.stub == nullptr) {
      // No leader known (etcd says none, or cannot say yet): wait for one.
    } else if (!registered()) {
      absl::Status s = RegisterOnce(target, &interval);
      {
        absl::MutexLock lock(&mu_);
        last_refusal_ = s.ok() ? "" : s.ToString();
      }
      if (!s.ok()) {
        report(target, s);
      } else {
        // A Follow racing this registration asks for another.
        absl::MutexLock lock(&mu_);
        if (generation == generation_) registered_.store(true, std::memory_order_release);
        last_error.clear();
        absl::FPrintF(stderr, "ckptd: registered with coordinator %s as host %s\n", target.address,
                      options_.self.host().host());
      }
    } else {
      absl::StatusOr<bool> known = HeartbeatOnce(target, interval);
      if (!known.ok()) {
        // The coordinator may be back: heartbeat again, it says if it
        // forgot us.
        report(target, known.status());
      } else if (!*known) {
        registered_.store(false, std::memory_order_release);
        absl::FPrintF(stderr,
                      "ckptd: coordinator %s does not know this host's instance; "
                      "registering again\n",
                      target.address);
      } else if (!last_error.empty()) {
        absl::FPrintF(stderr, "ckptd: coordinator %s reachable again\n", target.address);
        last_error.clear();
      }
    }
    // The next beat after one interval, or at once for a new leader.
    absl::MutexLock lock(&mu_);
    const absl::Time until = absl::Now() + interval;
    while (generation == generation_ && !stop_.HasBeenNotified() && absl::Now() < until) {
      changed_.WaitWithDeadline(&mu_, until);
    }
  }
}

}  // namespace ckpt::cluster
