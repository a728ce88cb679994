// The coordinator's planning memory (plan_budget.h): reservations share one
// budget across threads, a plan that does not fit waits until another
// gives its memory back, one larger than the whole budget or one that waits
// too long is refused naming the flag; the estimates grow with what a plan
// walks.
#include "daemon/planning/plan_budget.h"

#include <future>
#include <optional>
#include <string>
#include <vector>

#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

TEST_CASE("a plan that does not fit waits until another gives its memory back", "[plan_budget]") {
  PlanBudget budget(1000);
  absl::StatusOr<PlanBudget::Reservation> first =
      budget.Reserve(600, "the first plan", absl::InfiniteDuration());
  CKPT_REQUIRE_OK(first);
  CHECK(budget.in_use() == 600);
  std::optional<PlanBudget::Reservation> held(*std::move(first));
  // The second cannot fit beside it: it waits (seen by the budget, not by
  // sleeping) until the first is given back.
  auto second = std::async(std::launch::async, [&] {
    absl::StatusOr<PlanBudget::Reservation> r =
        budget.Reserve(500, "the second plan", absl::InfiniteDuration());
    const uint64_t in_use = budget.in_use();
    return std::make_pair(r.status(), in_use);
  });
  budget.AwaitWaiting(1);
  CHECK(budget.in_use() == 600);
  held.reset();
  const auto [status, in_use] = second.get();
  CKPT_REQUIRE_OK(status);
  CHECK(in_use == 500);         // while the second held its own
  CHECK(budget.in_use() == 0);  // and gave it back
  CHECK(budget.waiting() == 0);
}

TEST_CASE("many plans at once never hold more than the budget", "[plan_budget]") {
  PlanBudget budget(1000);
  std::atomic<uint64_t> most{0};
  std::vector<std::future<absl::Status>> plans;
  for (int p = 0; p < 16; ++p) {
    plans.push_back(std::async(std::launch::async, [&, p] {
      for (int round = 0; round < 50; ++round) {
        absl::StatusOr<PlanBudget::Reservation> r =
            budget.Reserve(100 + 37 * ((p + round) % 20), "a plan", absl::InfiniteDuration());
        if (!r.ok()) return r.status();
        uint64_t now = budget.in_use();
        uint64_t seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
      }
      return absl::OkStatus();
    }));
  }
  for (auto& plan : plans) CKPT_REQUIRE_OK(plan.get());
  CHECK(most.load() <= 1000);
  CHECK(most.load() > 0);
  CHECK(budget.in_use() == 0);
}

TEST_CASE("a plan larger than the budget, or waiting too long, is refused naming the flag",
          "[plan_budget]") {
  PlanBudget budget(uint64_t{64} << 20);
  CKPT_REQUIRE_ERROR(
      budget.Reserve(uint64_t{65} << 20, "the save plan of job j step 3", absl::InfiniteDuration()),
      absl::StatusCode::kResourceExhausted, "the save plan of job j step 3", "65 MiB",
      "--plan_memory_mib", "64 MiB");
  CHECK(budget.in_use() == 0);
  absl::StatusOr<PlanBudget::Reservation> held =
      budget.Reserve(uint64_t{40} << 20, "one", absl::InfiniteDuration());
  CKPT_REQUIRE_OK(held);
  CKPT_REQUIRE_ERROR(
      budget.Reserve(uint64_t{30} << 20, "the load plan of job j step 3", absl::Milliseconds(50)),
      absl::StatusCode::kDeadlineExceeded, "the load plan of job j step 3", "waited 50ms",
      "other plans hold 40 of the 64 MiB");
  CHECK(budget.in_use() == uint64_t{40} << 20);
}

TEST_CASE("the estimates grow with the shards, requests and chunks a plan walks", "[plan_budget]") {
  std::vector<v1::NodeSavePlan> small = {testing::Node("h0", 2, 1, {0, 1})};
  for (int r = 0; r < 2; ++r) {
    testing::AddShard(small[0], r,
                      testing::FlatShard("w", v1::FLOAT32, {100}, r * 50, r * 50 + 50));
  }
  std::vector<v1::NodeSavePlan> large = small;
  for (int t = 0; t < 1000; ++t) {
    for (int r = 0; r < 2; ++r) {
      testing::AddShard(
          large[0], r,
          testing::FlatShard(absl::StrCat("t", t), v1::FLOAT32, {100}, r * 50, r * 50 + 50));
    }
  }
  CHECK(SaveScratchBytes(small) > 0);
  CHECK(SaveScratchBytes(large) >= SaveScratchBytes(small) + 2000 * 64);
}

}  // namespace
}  // namespace ckpt::planning
