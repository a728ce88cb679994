// A node's link to the coordinator against a coordinator this test plays
// (a real gRPC server on a Unix socket): registration exchanges protocol
// versions and a version the node cannot serve is refused naming both; a
// leader's epoch is remembered and a lower one (a deposed leader) is
// refused; Follow moves the link to a new leader, which it registers with.
#include "daemon/cluster/coordinator_link.h"

#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ckpt/v1/cluster.grpc.pb.h"
#include "proto/lib/cluster_protocol.h"
#include "tests/catch.h"

namespace ckpt::cluster {
namespace {

class FakeCoordinator final : public v1::ClusterService::Service {
 public:
  FakeCoordinator(uint32_t version, int64_t epoch) : version_(version), epoch_(epoch) {
    char tmpl[] = "/tmp/ckpt-link-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    address_ = absl::StrCat("unix:", dir_, "/coordinator.sock");
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
  }
  ~FakeCoordinator() override {
    server_->Shutdown();
    unlink((dir_ + "/coordinator.sock").c_str());
    rmdir(dir_.c_str());
  }
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterHostRequest* request,
                        v1::RegisterHostResponse* response) override {
    node_version = request->protocol_version();
    registrations.fetch_add(1);
    response->set_protocol_version(version_);
    response->set_epoch(epoch_);
    response->set_heartbeat_interval_ms(50);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse* response) override {
    response->set_epoch(epoch_);
    return grpc::Status::OK;
  }
  const std::string& address() const { return address_; }

  std::atomic<int> registrations{0};
  std::atomic<uint32_t> node_version{0};

 private:
  const uint32_t version_;
  const int64_t epoch_;
  std::string dir_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

std::unique_ptr<CoordinatorLink> Link(const std::string& address) {
  CoordinatorLinkOptions options;
  options.address = address;
  options.self.mutable_host()->set_host("h0");
  options.self.set_instance("0123456789abcdef");
  absl::StatusOr<std::unique_ptr<CoordinatorLink>> link = CoordinatorLink::Start(options);
  REQUIRE(link.ok());
  return std::move(*link);
}

bool Eventually(const std::function<bool()>& done) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

TEST_CASE("a coordinator speaking a protocol this node cannot serve is refused, naming both",
          "[coordinator_link]") {
  FakeCoordinator future(99, 1);
  std::unique_ptr<CoordinatorLink> link = Link(future.address());
  REQUIRE(Eventually([&] { return !link->last_refusal().empty(); }));
  CHECK_FALSE(link->registered());
  const std::string refusal = link->last_refusal();
  CHECK(refusal.find("protocol 99") != std::string::npos);
  CHECK(refusal.find(absl::StrCat("versions ", kOldestClusterProtocolVersion, " to ",
                                  kClusterProtocolVersion)) != std::string::npos);
  CHECK(refusal.find(future.address()) != std::string::npos);
  CHECK(future.node_version == kClusterProtocolVersion);
}

TEST_CASE("a coordinator from before versions (0) is served as version 1", "[coordinator_link]") {
  FakeCoordinator old(0, 0);
  std::unique_ptr<CoordinatorLink> link = Link(old.address());
  REQUIRE(Eventually([&] { return link->registered(); }));
}

TEST_CASE("the link follows a new leader and refuses a deposed one's lower epoch",
          "[coordinator_link]") {
  FakeCoordinator first(kClusterProtocolVersion, 7);
  FakeCoordinator second(kClusterProtocolVersion, 9);
  FakeCoordinator deposed(kClusterProtocolVersion, 5);
  std::unique_ptr<CoordinatorLink> link = Link(first.address());
  REQUIRE(Eventually([&] { return link->registered(); }));
  // A coordinator's answer does not raise the bar (epochs come from etcd:
  // one answer must not lock out every real leader).
  CHECK(link->highest_epoch() == 0);
  link->Follow(second.address(), 9);
  CHECK(link->address() == second.address());
  REQUIRE(Eventually([&] { return link->registered() && second.registrations > 0; }));
  CHECK(link->highest_epoch() == 9);
  // None leads for a while: no connection, nothing registered.
  link->Follow("", 0);
  CHECK(link->channel() == nullptr);
  CHECK_FALSE(link->registered());
  // A stale answer: the old leader, still serving, answers with epoch 5.
  link->Follow(deposed.address(), 0);
  REQUIRE(Eventually([&] { return !link->last_refusal().empty(); }));
  CHECK_FALSE(link->registered());
  CHECK(link->last_refusal().find("epoch 5, below epoch 9") != std::string::npos);
}

}  // namespace
}  // namespace ckpt::cluster
