// The node's side of save planning: the ranks' requests batched into one
// plan, and the assignment split back into each rank's items. The cases
// run the real planner in between, so they check the round trip the save
// session makes: every write item reaches exactly the rank and the
// request entry it names, with its room at the pool's alignment.
#include "daemon/planning/node_save_plan.h"

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/planning/save_planner.h"
#include "proto/lib/region_convert.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

v1::HostIdentity Host() {
  v1::HostIdentity host;
  host.set_host("h0");
  return host;
}

// Three ranks: rank 0 and 1 replicate half of "w", rank 2 holds the other
// half; each has a per-rank object, ranks 0 and 2 a global one, rank 1 an
// empty one. Metadata: rank 2 overrides a key rank 0 set.
std::vector<v1::PlanSaveRequest> ThreeRanks() {
  std::vector<v1::PlanSaveRequest> requests(3);
  for (int r = 0; r < 3; ++r) {
    const int64_t half = r < 2 ? 0 : 32;
    *requests[r].add_shards() = BoxShard("w", v1::FLOAT32, {64, 100}, {half, 0}, {32, 100});
    *requests[r].add_objects() = Object("rng", false, 10 + r);
  }
  *requests[2].add_shards() = Whole("bias", v1::BFLOAT16, {7});
  *requests[0].add_objects() = Object("cfg", true, 5000);
  *requests[2].add_objects() = Object("cfg", true, 5000);
  *requests[1].add_objects() = Object("empty", false, 0);
  requests[0].set_partial(false);
  (*requests[0].mutable_user_metadata())["epoch"] = "3";
  (*requests[0].mutable_user_metadata())["lr"] = "0.1";
  (*requests[2].mutable_user_metadata())["lr"] = "0.05";
  return requests;
}

RankRequests Pointers(const std::vector<v1::PlanSaveRequest>& r) {
  RankRequests out;
  for (size_t i = 0; i < r.size(); ++i) out[static_cast<int>(i)] = &r[i];
  return out;
}

TEST_CASE("node save plan: the ranks' requests become one plan", "[node_save_plan]") {
  const std::vector<v1::PlanSaveRequest> requests = ThreeRanks();
  const v1::NodeSavePlan plan = BatchRankPlans(Host(), "job", 9, 3, 4, Pointers(requests));
  CHECK(plan.host().host() == "h0");
  CHECK(plan.job() == "job");
  CHECK(plan.step() == 9);
  CHECK(plan.world_size() == 3);
  CHECK(plan.writer_threads() == 4);
  CHECK_FALSE(plan.partial());
  REQUIRE(plan.ranks_size() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(plan.ranks(r).rank() == r);
    // Compact: each shard as its tensor and region in the host's tables.
    const v1::RankSavePlan& rank = plan.ranks(r);
    CHECK(rank.shards_size() == 0);
    REQUIRE(rank.shard_tensors_size() == requests[r].shards_size());
    REQUIRE(rank.shard_regions_size() == requests[r].shards_size());
    for (int i = 0; i < requests[r].shards_size(); ++i) {
      const v1::TensorShard& sent = requests[r].shards(i);
      REQUIRE(rank.shard_tensors(i) < static_cast<uint32_t>(plan.tensors_size()));
      REQUIRE(rank.shard_regions(i) < static_cast<uint32_t>(plan.regions_size()));
      const v1::TensorDesc& tensor = plan.tensors(static_cast<int>(rank.shard_tensors(i)));
      CHECK(tensor.fqn() == sent.fqn());
      CHECK(tensor.dtype() == sent.dtype());
      CHECK(ShapeFromProto(tensor.global_shape()) == ShapeFromProto(sent.global_shape()));
      CHECK(plan.regions(static_cast<int>(rank.shard_regions(i))).SerializeAsString() ==
            sent.region().SerializeAsString());
    }
    CHECK(plan.ranks(r).objects_size() == requests[r].objects_size());
    for (int i = 0; i < requests[r].objects_size(); ++i) {
      CHECK(plan.ranks(r).objects(i).SerializeAsString() ==
            requests[r].objects(i).SerializeAsString());
    }
  }
  CHECK(plan.compact());
  CHECK(plan.tensors_size() == 2);  // w and bias, once each
  CHECK(plan.regions_size() == 3);  // w's two halves and the whole of bias
  CHECK(plan.user_metadata().size() == 2);
  CHECK(plan.user_metadata().at("epoch") == "3");
  CHECK(plan.user_metadata().at("lr") == "0.05");

  std::vector<v1::PlanSaveRequest> partial = requests;
  partial[0].set_partial(true);
  CHECK(BatchRankPlans(Host(), "job", 9, 3, 4, Pointers(partial)).partial());
}

TEST_CASE("node save plan: the assignment goes back to the ranks that write", "[node_save_plan]") {
  const std::vector<v1::PlanSaveRequest> requests = ThreeRanks();
  const v1::NodeSavePlan plan = BatchRankPlans(Host(), "job", 9, 3, 2, Pointers(requests));
  planning::SavePlannerOptions options;
  options.chunk_bytes = 4096;
  absl::StatusOr<v1::SaveAssignment> assignment = planning::PlanSave({plan}, options);
  CKPT_REQUIRE_OK(assignment);
  const v1::HostAssignment& host = assignment->hosts(0);

  for (uint64_t alignment : {uint64_t{4096}, uint64_t{512}}) {
    absl::StatusOr<std::map<int, RankItems>> split =
        SplitByRank(host, Pointers(requests), alignment);
    CKPT_REQUIRE_OK(split);
    REQUIRE(split->size() == 3);
    std::set<const v1::WriteItem*> seen;
    size_t global_cfg = 0;
    size_t w_halves = 0;
    for (int r = 0; r < 3; ++r) {
      const RankItems& rank = (*split)[r];
      REQUIRE(rank.items.size() == rank.writes.size());
      for (size_t k = 0; k < rank.items.size(); ++k) {
        const v1::SaveItem& item = rank.items[k];
        const v1::WriteItem& write = *rank.writes[k];
        INFO("rank " << r << " item " << k << ": " << write.ShortDebugString());
        CHECK(seen.insert(&write).second);
        CHECK(write.rank() == r);
        CHECK(item.index() == write.index());
        CHECK(item.bytes() == write.bytes());
        CHECK(item.padded_bytes() % alignment == 0);
        CHECK(item.padded_bytes() >= item.bytes());
        CHECK(item.padded_bytes() < item.bytes() + alignment);
        if (write.is_object()) {
          REQUIRE(item.kind() == v1::SaveItem::OBJECT);
          const v1::ObjectDesc& object = requests[r].objects(static_cast<int>(item.index()));
          CHECK(object.length() == item.bytes());
          global_cfg += object.key() == "cfg";
        } else {
          REQUIRE(item.kind() == v1::SaveItem::SHARD);
          const v1::TensorShard& shard = requests[r].shards(static_cast<int>(item.index()));
          const uint64_t bytes =
              RegionElements(shard).size() * static_cast<uint64_t>(ElementSize(shard.dtype()));
          CHECK(bytes == item.bytes());
          w_halves += shard.fqn() == "w";
        }
      }
    }
    // Every write item once; replicas and the global object written once.
    CHECK(seen.size() == static_cast<size_t>(host.items_size()));
    CHECK(global_cfg == 1);
    CHECK(w_halves == 2);
  }
}

TEST_CASE("node save plan: an assignment naming what does not exist is refused",
          "[node_save_plan]") {
  const std::vector<v1::PlanSaveRequest> requests = ThreeRanks();
  v1::HostAssignment host;
  host.add_files("data/h0-0.bin");
  v1::WriteItem* write = host.add_items();
  write->set_rank(1);
  write->set_index(0);
  write->set_bytes(100);
  CKPT_REQUIRE_OK(SplitByRank(host, Pointers(requests), 4096));

  SECTION("a rank outside the world") {
    write->set_rank(3);
    CKPT_REQUIRE_ERROR(SplitByRank(host, Pointers(requests), 4096), absl::StatusCode::kInternal,
                       "rank 3, which is not one of the 3 ranks on this host");
  }
  SECTION("a rank of the job on another host") {
    RankRequests local = Pointers(requests);
    local.erase(1);
    CKPT_REQUIRE_ERROR(SplitByRank(host, local, 4096), absl::StatusCode::kInternal,
                       "rank 1, which is not one of the 2 ranks on this host");
  }
  SECTION("a shard the rank did not list") {
    write->set_index(1);
    CKPT_REQUIRE_ERROR(SplitByRank(host, Pointers(requests), 4096), absl::StatusCode::kInternal,
                       "shard 1 of rank 1, which lists 1");
  }
  SECTION("an object the rank did not list") {
    write->set_is_object(true);
    write->set_index(2);
    CKPT_REQUIRE_ERROR(SplitByRank(host, Pointers(requests), 4096), absl::StatusCode::kInternal,
                       "object 2 of rank 1, which lists 2");
  }
  SECTION("a writer file that does not exist") {
    write->set_writer(1);
    CKPT_REQUIRE_ERROR(SplitByRank(host, Pointers(requests), 4096), absl::StatusCode::kInternal,
                       "writer 1 of 1 files");
  }
}

}  // namespace
}  // namespace ckpt::planning
