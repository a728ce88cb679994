// Raw CoordinatorService calls for hostile tests: what a node daemon sends
// the cluster's coordinator, built by hand so a test controls every field
// (unregistered hosts, worlds and ranks out of bounds, unknown tiers). Each
// call carries a deadline, so a coordinator bug fails the test instead of
// hanging it.
#ifndef CKPT_TESTS_SUPPORT_COORDINATOR_RPC_H_
#define CKPT_TESTS_SUPPORT_COORDINATOR_RPC_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "ckpt/v1/coordinator.grpc.pb.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {

// A channel to the coordinator's TCP address with `token` (its admin token
// when empty), taking messages up to 256 MiB both ways.
std::shared_ptr<grpc::Channel> Channel(const TestDaemon& coordinator, const std::string& token);

void Deadline(grpc::ClientContext& context, absl::Duration in = absl::Seconds(20));

// One host's plan for step 1 (save) or latest (load) of `job`, with these
// ranks of a world of `world`.
v1::NodeSavePlan SavePlan(const std::string& host, int world, const std::vector<int>& ranks,
                          int tier = v1::SAVE_TIER_DURABLE, const std::string& job = "evil");
v1::NodeLoadPlan LoadPlan(const std::string& host, int world, const std::vector<int>& ranks,
                          int tier = v1::LOAD_TIER_ANY, const std::string& job = "evil");

grpc::Status Send(v1::CoordinatorService::Stub& stub, const v1::NodeSavePlan& plan,
                  absl::Duration deadline = absl::Seconds(20));
grpc::Status Send(v1::CoordinatorService::Stub& stub, const v1::NodeLoadPlan& plan,
                  absl::Duration deadline = absl::Seconds(20),
                  v1::LoadAssignment* answer = nullptr);

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_COORDINATOR_RPC_H_
