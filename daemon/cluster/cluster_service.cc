#include "daemon/cluster/cluster_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "proto/lib/cluster_protocol.h"
#include "proto/lib/grpc_status.h"

namespace ckpt::cluster {
namespace {

// Heartbeat ages from a clock NTP cannot step.
absl::Time MonotonicNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace

ClusterServiceImpl::ClusterServiceImpl(const auth::Authenticator& auth,
                                       ClusterServiceOptions options)
    : auth_(auth),
      options_(std::move(options)),
      registry_(
          {.heartbeat_timeout = options_.heartbeat_timeout, .max_hosts = options_.max_hosts}) {
  sweeper_ = std::thread([this] {
    const absl::Duration period = std::max(options_.heartbeat_timeout / 4, absl::Milliseconds(50));
    while (!stop_.WaitForNotificationWithTimeout(period)) {
      for (const std::string& host : registry_.ExpireSilent(MonotonicNow())) {
        const std::string why = absl::StrCat("lost: no heartbeat for ",
                                             absl::FormatDuration(options_.heartbeat_timeout),
                                             " (its ckptd died, or its network is cut)");
        absl::FPrintF(stderr, "ckptd: host %s %s\n", host, why);
        for (coordinator::Coordinator* c : Coordinators()) c->HostLost(host, why);
      }
      // Saves no host waits on still end at their deadlines.
      for (coordinator::Coordinator* c : Coordinators()) c->ExpireSaves(absl::Now());
    }
  });
}

ClusterServiceImpl::~ClusterServiceImpl() {
  stop_.Notify();
  sweeper_.join();
}

grpc::Status ClusterServiceImpl::Register(grpc::ServerContext* context,
                                          const v1::RegisterHostRequest* request,
                                          v1::RegisterHostResponse* response) {
  absl::StatusOr<auth::Caller> caller = auth_.Authorize(*context, auth::Permission::kAdmin);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = CheckLeading(); !s.ok()) return ToGrpcStatus(s);
  if (absl::Status s = CheckClusterProtocol(
          request->protocol_version(), absl::StrCat("host ", request->host().host().substr(0, 256)),
          "this coordinator");
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  if (absl::Status s = registry_.Register(*request, MonotonicNow()); !s.ok())
    return ToGrpcStatus(s);
  // A host registers anew after its daemon restarted (or after it was
  // lost): whatever its earlier instance was saving is gone.
  for (coordinator::Coordinator* c : Coordinators()) {
    c->HostLost(request->host().host(), "registered again: its earlier ckptd instance is gone");
    c->HostRegistered(request->host().host());
  }
  if (options_.adopt_memory_steps && request->memory_manifests_size() > 0) {
    options_.adopt_memory_steps(*request);
  }
  absl::FPrintF(stderr, "ckptd: host %s registered (instance %s, peer channel %s, from %s)\n",
                request->host().host(), request->instance(),
                request->host().address().empty() ? "none" : request->host().address(),
                caller->peer);
  response->set_coordinator_instance(options_.instance);
  response->set_heartbeat_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  response->set_protocol_version(kClusterProtocolVersion);
  response->set_epoch(epoch());
  return grpc::Status::OK;
}

grpc::Status ClusterServiceImpl::Heartbeat(grpc::ServerContext* context,
                                           const v1::HeartbeatRequest* request,
                                           v1::HeartbeatResponse* response) {
  absl::StatusOr<auth::Caller> caller = auth_.Authorize(*context, auth::Permission::kAdmin);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status s = CheckLeading(); !s.ok()) return ToGrpcStatus(s);
  const bool known = registry_.Heartbeat(*request, MonotonicNow());
  response->set_register_again(!known);
  response->set_epoch(epoch());
  if (known) {
    // What it carries now, for when it is lost (host_ranks.h).
    for (coordinator::Coordinator* c : Coordinators())
      c->HostCarries(request->host(), request->jobs());
  }
  constexpr size_t kMaxLostHosts = 1024;
  for (std::string& host : registry_.LostHosts(MonotonicNow(), kMaxLostHosts)) {
    response->add_lost_hosts(std::move(host));
  }
  if (options_.verify_rounds != nullptr && !response->register_again()) {
    options_.verify_rounds->TakeOrders(request->host(), [&](const v1::VerifyOrder& order) {
      *response->add_verify_orders() = order;
    });
  }
  if (options_.coordinator != nullptr && request->save_ids_size() > 0) {
    // A host takes part in a few saves at a time: a heartbeat listing more,
    // or ids longer than any save's, is answered for the first only, so the
    // answer stays small whatever the request holds.
    constexpr int kMaxSaveIds = 1024;
    constexpr size_t kMaxSaveIdBytes = 512;
    std::vector<std::string> ids;
    for (const std::string& id : request->save_ids()) {
      if (static_cast<int>(ids.size()) == kMaxSaveIds) break;
      if (id.size() <= kMaxSaveIdBytes) ids.push_back(id);
    }
    // A memory-tier save is its coordinator's; the other does not know it.
    std::vector<std::string> durable_ids;
    std::vector<std::string> memory_ids;
    for (std::string& id : ids) {
      const bool memory =
          options_.memory_coordinator != nullptr && options_.memory_coordinator->KnowsSave(id);
      (memory ? memory_ids : durable_ids).push_back(std::move(id));
    }
    std::vector<std::pair<std::string, std::string>> failed =
        options_.coordinator->FailedSaves(durable_ids);
    if (!memory_ids.empty()) {
      for (auto& f : options_.memory_coordinator->FailedSaves(memory_ids)) {
        failed.push_back(std::move(f));
      }
    }
    for (auto& [id, reason] : failed) {
      v1::HeartbeatResponse::FailedSave* failed = response->add_failed_saves();
      failed->set_save_id(id);
      failed->set_reason(reason);
    }
  }
  return grpc::Status::OK;
}

std::vector<coordinator::Coordinator*> ClusterServiceImpl::Coordinators() const {
  std::vector<coordinator::Coordinator*> all;
  if (options_.coordinator != nullptr) all.push_back(options_.coordinator);
  if (options_.memory_coordinator != nullptr) all.push_back(options_.memory_coordinator);
  return all;
}

absl::Status ClusterServiceImpl::CheckLeading() const {
  return options_.leading ? options_.leading() : absl::OkStatus();
}

void ClusterServiceImpl::ForgetHosts() { registry_.Clear(); }

bool ClusterServiceImpl::HostLive(const std::string& host) const {
  return registry_.Live(host, MonotonicNow());
}

v1::ClusterStatusResponse ClusterServiceImpl::Registry() const {
  return registry_.Status(MonotonicNow());
}

grpc::Status ClusterServiceImpl::ClusterStatus(grpc::ServerContext* context,
                                               const v1::ClusterStatusRequest*,
                                               v1::ClusterStatusResponse* response) {
  absl::StatusOr<auth::Caller> caller = auth_.Authorize(*context, auth::Permission::kRead);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  *response = registry_.Status(MonotonicNow());
  response->set_coordinator_instance(options_.instance);
  if (options_.coordinator != nullptr) {
    response->set_plan_cache_hits(options_.coordinator->plan_cache_stats().hits);
    response->set_plan_barrier_skips(options_.coordinator->barrier_skips());
    response->set_saves_in_flight(static_cast<uint32_t>(options_.coordinator->saves_in_flight()));
    response->set_loads_gathering(static_cast<uint32_t>(options_.coordinator->loads_gathering()));
  }
  response->set_protocol_version(kClusterProtocolVersion);
  if (options_.describe_election) options_.describe_election(*response->mutable_election());
  return grpc::Status::OK;
}

}  // namespace ckpt::cluster
