#include "tests/support/coordinator_rpc.h"

#include "absl/time/clock.h"

namespace ckpt::testing {

std::shared_ptr<grpc::Channel> Channel(const TestDaemon& coordinator, const std::string& token) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(256 << 20);
  args.SetMaxReceiveMessageSize(256 << 20);
  return grpc::CreateCustomChannel(coordinator.tcp_address(),
                                   coordinator.CredentialsFor(coordinator.tcp_address(), token),
                                   args);
}

void Deadline(grpc::ClientContext& context, absl::Duration in) {
  context.set_deadline(absl::ToChronoTime(absl::Now() + in));
}

v1::NodeSavePlan SavePlan(const std::string& host, int world, const std::vector<int>& ranks,
                          int tier, const std::string& job) {
  v1::NodeSavePlan plan;
  plan.mutable_host()->set_host(host);
  plan.set_job(job);
  plan.set_step(1);
  plan.set_world_size(world);
  plan.set_writer_threads(1);
  plan.set_tier(static_cast<v1::SaveTier>(tier));
  for (int r : ranks) plan.add_ranks()->set_rank(r);
  return plan;
}

v1::NodeLoadPlan LoadPlan(const std::string& host, int world, const std::vector<int>& ranks,
                          int tier, const std::string& job) {
  v1::NodeLoadPlan plan;
  plan.mutable_host()->set_host(host);
  plan.set_job(job);
  plan.set_step(-1);
  plan.set_world_size(world);
  plan.set_tier(static_cast<v1::LoadTier>(tier));
  for (int r : ranks) plan.add_ranks()->set_rank(r);
  return plan;
}

grpc::Status Send(v1::CoordinatorService::Stub& stub, const v1::NodeSavePlan& plan,
                  absl::Duration deadline) {
  grpc::ClientContext context;
  Deadline(context, deadline);
  v1::SaveAssignment answer;
  return stub.PlanSave(&context, plan, &answer);
}

grpc::Status Send(v1::CoordinatorService::Stub& stub, const v1::NodeLoadPlan& plan,
                  absl::Duration deadline, v1::LoadAssignment* answer) {
  grpc::ClientContext context;
  Deadline(context, deadline);
  v1::LoadAssignment ignored;
  return stub.PlanLoad(&context, plan, answer != nullptr ? answer : &ignored);
}

}  // namespace ckpt::testing
