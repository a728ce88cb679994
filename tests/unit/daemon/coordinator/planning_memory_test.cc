// The coordinator plans within its planning memory (--plan_memory_mib,
// planning/plan_budget.h): a save or load whose estimated scratch is more
// than the whole budget is refused naming the flag, and the coordinator
// plans the next one that fits; within the budget, plans go through and
// give their memory back.
#include <memory>
#include <string>

#include "daemon/coordinator/commit.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

constexpr char kRoot[] = "/ckpt";

// One host of one rank saving `tensors` small tensors.
v1::NodeSavePlan SavePlan(int tensors) {
  v1::NodeSavePlan node = planning::testing::Node("h0", 1, 1, {0});
  node.set_job("job");
  node.set_step(7);
  for (int t = 0; t < tensors; ++t) {
    planning::testing::AddShard(node, 0,
                                planning::testing::Whole(absl::StrCat("t", t), v1::FLOAT32, {16}));
  }
  return node;
}

// A committed step 3 of job "job": tensor "w", 10 bytes in 4-byte chunks.
void CommitStep(storage::Backend& backend) {
  const std::string partial = storage::PartialDir(kRoot, "job", 3, "h0-00000000000000aa-3");
  REQUIRE(backend.CreateDirs(partial + "/data").ok());
  auto file = backend.NewWritableFile(partial + "/data/h0-0.bin");
  REQUIRE(file.ok());
  REQUIRE((*file)->WriteAt(0, "0123456789", 10).ok());
  REQUIRE((*file)->Sync().ok());
  REQUIRE((*file)->Close().ok());
  REQUIRE(CommitCheckpoint(backend, kRoot, partial,
                           planning::testing::ManifestOf("job", 3, "0123456789", 4))
              .ok());
}

v1::NodeLoadPlan LoadPlan() {
  v1::NodeLoadPlan node;
  node.mutable_host()->set_host("h0");
  node.set_job("job");
  node.set_step(3);
  node.set_world_size(1);
  v1::NodeLoadPlan::RankRequests* rank = node.add_ranks();
  rank->set_rank(0);
  *rank->add_tensors() = planning::testing::Whole("w", v1::UINT8, {10});
  return node;
}

TEST_CASE("a plan larger than the planning memory is refused naming the flag; one within it runs",
          "[planning_memory]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  CommitStep(*backend);
  // Less than one host's fixed share of any plan.
  auto small = std::make_shared<planning::PlanBudget>(32 << 10);
  Coordinator tight(*backend, kRoot, {}, {},
                    RendezvousOptions{.plan_timeout = absl::Seconds(5), .plan_budget = small});
  CKPT_REQUIRE_ERROR(tight.PlanSave(SavePlan(3)), absl::StatusCode::kResourceExhausted,
                     "the save plan of job job step 7", "--plan_memory_mib");
  CKPT_REQUIRE_ERROR(tight.PlanLoad(LoadPlan()), absl::StatusCode::kResourceExhausted,
                     "the load plan of job job step 3", "--plan_memory_mib");
  CHECK(small->in_use() == 0);

  auto ample = std::make_shared<planning::PlanBudget>(64 << 20);
  Coordinator roomy(*backend, kRoot, {}, {},
                    RendezvousOptions{.plan_timeout = absl::Seconds(5), .plan_budget = ample});
  absl::StatusOr<v1::LoadAssignment> load = roomy.PlanLoad(LoadPlan());
  CKPT_REQUIRE_OK(load);
  CHECK(load->reads_size() == 3);
  absl::StatusOr<v1::SaveAssignment> save = roomy.PlanSave(SavePlan(3));
  CKPT_REQUIRE_OK(save);
  CHECK(save->hosts(0).items_size() == 3);
  CHECK(ample->in_use() == 0);  // given back once planned
}

}  // namespace
}  // namespace ckpt::coordinator
