// The compact form of a host's save and load plans (coordinator.proto):
// what node daemons send and the planners read. A plan spelled out and its
// compact form plan alike; a compact plan is checked as hostile input
// (indexes, counts, forms mixed) before anything is sized from it.
#include "proto/lib/compact_plan.h"

#include <google/protobuf/util/message_differencer.h>

#include <string>
#include <vector>

#include "daemon/planning/load_planner.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/save_planner.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

// Two hosts, 4 ranks each: TP=2 row halves of two layers, DP replicas on
// the other host, a replicated norm, an FSDP-style flat range per rank of
// a third tensor, and objects.
std::vector<v1::NodeSavePlan> Spelled() {
  std::vector<v1::NodeSavePlan> nodes = {Node("h0", 8, 2, {0, 1, 2, 3}),
                                         Node("h1", 8, 2, {4, 5, 6, 7})};
  for (int r = 0; r < 8; ++r) {
    v1::NodeSavePlan& node = nodes[r / 4];
    const int64_t half = (r % 2) * 32;
    AddShard(node, r, BoxShard("l0.w", v1::FLOAT32, {64, 48}, {half, 0}, {32, 48}));
    AddShard(node, r, BoxShard("l1.w", v1::FLOAT32, {64, 48}, {half, 0}, {32, 48}));
    AddShard(node, r, Whole("norm", v1::BFLOAT16, {48}));
    AddShard(node, r, FlatShard("emb", v1::FLOAT16, {16, 64}, (r % 4) * 256, (r % 4 + 1) * 256));
    *RankOf(node, r).add_objects() = Object("rng", false, 16);
  }
  *RankOf(nodes[0], 0).add_objects() = Object("cfg", true, 100);
  *RankOf(nodes[1], 5).add_objects() = Object("cfg", true, 100);
  return nodes;
}

std::vector<v1::NodeSavePlan> Compacted(std::vector<v1::NodeSavePlan> nodes) {
  for (v1::NodeSavePlan& node : nodes) CKPT_REQUIRE_OK(CompactSavePlan(node, RequestLimits()));
  return nodes;
}

TEST_CASE("a compact plan holds each host's tensors and regions once", "[compact_plan]") {
  const std::vector<v1::NodeSavePlan> nodes = Compacted(Spelled());
  for (const v1::NodeSavePlan& node : nodes) {
    CHECK(node.compact());
    CHECK(node.tensors_size() == 4);  // l0.w, l1.w, norm, emb
    // The two row halves (shared by both layers), the whole norm, and four
    // flat ranges.
    CHECK(node.regions_size() == 7);
    for (const v1::RankSavePlan& rank : node.ranks()) {
      CHECK(rank.shards_size() == 0);
      CHECK(rank.shard_tensors_size() == 4);
      CHECK(rank.shard_regions_size() == 4);
    }
  }
  // Compacting again changes nothing.
  std::vector<v1::NodeSavePlan> again = nodes;
  CKPT_REQUIRE_OK(CompactSavePlan(again[0], RequestLimits()));
  CHECK(google::protobuf::util::MessageDifferencer::Equals(again[0], nodes[0]));
}

TEST_CASE("a plan spelled out and its compact form get the same assignment", "[compact_plan]") {
  const std::vector<v1::NodeSavePlan> spelled = Spelled();
  auto a = PlanSave(spelled, PlannerOptions());
  CKPT_REQUIRE_OK(a);
  auto b = PlanSave(Compacted(spelled), PlannerOptions());
  CKPT_REQUIRE_OK(b);
  CHECK(google::protobuf::util::MessageDifferencer::Equals(*a, *b));
  // Every distinct region once: 2 layers x 2 halves, the norm, 4 ranges,
  // 8 rng objects and one cfg.
  int items = 0;
  for (const v1::HostAssignment& host : b->hosts()) items += host.items_size();
  CHECK(items == 4 + 1 + 4 + 8 + 1);
  // One host compact, the other spelled out: the same again.
  std::vector<v1::NodeSavePlan> mixed = spelled;
  CKPT_REQUIRE_OK(CompactSavePlan(mixed[1], RequestLimits()));
  auto c = PlanSave(mixed, PlannerOptions());
  CKPT_REQUIRE_OK(c);
  CHECK(google::protobuf::util::MessageDifferencer::Equals(*a, *c));
}

TEST_CASE("tensors that ranks of one host disagree on stay apart and are named", "[compact_plan]") {
  std::vector<v1::NodeSavePlan> nodes = Spelled();
  *RankOf(nodes[0], 2).mutable_shards(2) = Whole("norm", v1::FLOAT32, {48});
  nodes = Compacted(nodes);
  CHECK(nodes[0].tensors_size() == 5);
  CKPT_REQUIRE_ERROR(PlanSave(nodes, PlannerOptions()), absl::StatusCode::kInvalidArgument,
                     "tensor norm", "rank 2 has dtype FLOAT32", "rank 0 has dtype BFLOAT16");
}

TEST_CASE("a compact plan's indexes and counts are checked before use", "[compact_plan]") {
  const std::vector<v1::NodeSavePlan> good = Compacted(Spelled());
  CKPT_REQUIRE_OK(PlanSave(good, PlannerOptions()));

  std::vector<v1::NodeSavePlan> bad = good;
  RankOf(bad[1], 6).set_shard_tensors(3, 4);
  CKPT_REQUIRE_ERROR(PlanSave(bad, PlannerOptions()), absl::StatusCode::kInvalidArgument, "rank 6",
                     "shard 3 names tensor 4");
  bad = good;
  RankOf(bad[0], 1).set_shard_regions(0, 1u << 31);
  CKPT_REQUIRE_ERROR(PlanSave(bad, PlannerOptions()), absl::StatusCode::kInvalidArgument, "rank 1",
                     "region 2147483648");
  bad = good;
  RankOf(bad[0], 3).add_shard_tensors(0);  // one more tensor than regions
  CKPT_REQUIRE_ERROR(PlanSave(bad, PlannerOptions()), absl::StatusCode::kInvalidArgument, "rank 3",
                     "5 shard tensors, 4 shard regions");
  bad = good;
  *RankOf(bad[0], 3).add_shards() = Whole("norm", v1::BFLOAT16, {48});  // both forms
  CKPT_REQUIRE_ERROR(PlanSave(bad, PlannerOptions()), absl::StatusCode::kInvalidArgument, "rank 3",
                     "1 shards spelled out in a compact plan");
  // A plan spelled out may not carry the compact form's parts.
  bad = Spelled();
  bad[0].add_regions();
  CKPT_REQUIRE_ERROR(PlanSave(bad, PlannerOptions()), absl::StatusCode::kInvalidArgument, "host h0",
                     "compact form's tables");
  bad = Spelled();
  RankOf(bad[1], 4).add_shard_tensors(0);
  CKPT_REQUIRE_ERROR(PlanSave(bad, PlannerOptions()), absl::StatusCode::kInvalidArgument, "rank 4",
                     "compact shards");
  // Tables larger than the host's ranks may list are refused unread.
  bad = good;
  SavePlannerOptions tight = PlannerOptions();
  tight.limits.max_tensors_per_plan = 4;
  CKPT_REQUIRE_OK(PlanSave(good, tight));
  for (int i = 0; i < 4 * 4 + 1; ++i) bad[0].add_regions();
  CKPT_REQUIRE_ERROR(PlanSave(bad, tight), absl::StatusCode::kResourceExhausted, "host h0",
                     "--max_tensors_per_plan");
  // A region of too many dimensions is refused before it is hashed.
  bad = good;
  v1::Box* box = bad[0].mutable_regions(0)->mutable_box();
  for (int d = 0; d < 100; ++d) box->add_offsets(0);
  CKPT_REQUIRE_ERROR(PlanSave(bad, PlannerOptions()), absl::StatusCode::kResourceExhausted,
                     "--max_dims");
  bad = good;
  for (int d = 0; d < 100; ++d) bad[1].mutable_tensors(0)->add_global_shape(1);
  CKPT_REQUIRE_ERROR(PlanSave(bad, PlannerOptions()), absl::StatusCode::kResourceExhausted,
                     "--max_dims");
}

TEST_CASE("compacting checks the device buffers it drops", "[compact_plan]") {
  std::vector<v1::NodeSavePlan> nodes = Spelled();
  v1::DeviceBuffer* buffer = RankOf(nodes[1], 5).mutable_shards(0)->mutable_device_buffer();
  buffer->set_allocation_bytes(32 * 48 * 4);  // exactly the shard
  CKPT_REQUIRE_OK(CompactSavePlan(nodes[1], RequestLimits()));
  nodes = Spelled();
  buffer = RankOf(nodes[1], 5).mutable_shards(0)->mutable_device_buffer();
  buffer->set_allocation_bytes(32 * 48 * 4);
  buffer->set_offset(1);
  CKPT_REQUIRE_ERROR(CompactSavePlan(nodes[1], RequestLimits()), absl::StatusCode::kInvalidArgument,
                     "rank 5", "tensor l0.w", "outside its allocation");
  CKPT_REQUIRE_ERROR(PlanSave(nodes, PlannerOptions()), absl::StatusCode::kInvalidArgument,
                     "rank 5", "outside its allocation");
}

// The save above loaded resharded: three row parts of the layers, the norm
// and two of the four ranges, on two hosts; rank 3 replicates rank 0.
std::vector<v1::NodeLoadPlan> LoadSpelled() {
  const auto rows = [](int64_t first, int64_t count) {
    return std::vector<v1::TensorShard>{
        BoxShard("l0.w", v1::FLOAT32, {64, 48}, {first, 0}, {count, 48}),
        BoxShard("l1.w", v1::FLOAT32, {64, 48}, {first, 0}, {count, 48}),
        Whole("norm", v1::BFLOAT16, {48}),
        FlatShard("emb", v1::FLOAT16, {16, 64}, first * 16, first * 16 + 256)};
  };
  std::vector<v1::NodeLoadPlan> nodes = {LoadNode("a", {{0, rows(0, 16)}, {1, rows(16, 32)}}),
                                         LoadNode("b", {{2, rows(48, 16)}, {3, rows(0, 16)}})};
  for (v1::NodeLoadPlan& node : nodes) node.set_world_size(4);
  return nodes;
}

std::vector<v1::NodeLoadPlan> CompactedLoad(std::vector<v1::NodeLoadPlan> nodes) {
  for (v1::NodeLoadPlan& node : nodes) CKPT_REQUIRE_OK(CompactLoadPlan(node, RequestLimits()));
  return nodes;
}

v1::CheckpointManifest Saved() {
  auto saved = PlanSave(Spelled(), PlannerOptions());
  CKPT_REQUIRE_OK(saved);
  v1::CheckpointManifest manifest = planning::ManifestOf(*saved);
  return manifest;
}

TEST_CASE("a load spelled out and its compact form get the same plan", "[compact_plan]") {
  const v1::CheckpointManifest manifest = Saved();
  const std::vector<v1::NodeLoadPlan> spelled = LoadSpelled();
  const std::vector<v1::NodeLoadPlan> compact = CompactedLoad(spelled);
  for (const v1::NodeLoadPlan& node : compact) {
    CHECK(node.compact());
    CHECK(node.tensors_size() == 4);
    for (const v1::NodeLoadPlan::RankRequests& rank : node.ranks()) {
      CHECK(rank.tensors_size() == 0);
      CHECK(rank.request_tensors_size() == 4);
    }
  }
  auto a = PlanLoad(manifest, spelled);
  CKPT_REQUIRE_OK(a);
  auto b = PlanLoad(manifest, compact);
  CKPT_REQUIRE_OK(b);
  CHECK(google::protobuf::util::MessageDifferencer::Equals(*a, *b));
  CHECK(b->reads_size() > 0);
  CHECK(b->sizes_size() == 4);
}

TEST_CASE("a compact load's indexes and counts are checked before use", "[compact_plan]") {
  const v1::CheckpointManifest manifest = Saved();
  const std::vector<v1::NodeLoadPlan> good = CompactedLoad(LoadSpelled());
  CKPT_REQUIRE_OK(PlanLoad(manifest, good));
  auto rank_of = [](v1::NodeLoadPlan& node, int r) -> v1::NodeLoadPlan::RankRequests& {
    for (auto& rank : *node.mutable_ranks()) {
      if (rank.rank() == r) return rank;
    }
    FAIL("no rank " << r);
    return *node.mutable_ranks(0);
  };
  std::vector<v1::NodeLoadPlan> bad = good;
  rank_of(bad[1], 2).set_request_tensors(1, 9);
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kInvalidArgument, "rank 2",
                     "request 1 names tensor 9");
  bad = good;
  rank_of(bad[0], 1).mutable_request_regions()->RemoveLast();
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kInvalidArgument, "rank 1",
                     "4 request tensors, 3 request regions");
  bad = good;
  *rank_of(bad[0], 0).add_tensors() = Whole("norm", v1::BFLOAT16, {48});
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kInvalidArgument, "rank 0",
                     "1 requests spelled out in a compact plan");
  bad = LoadSpelled();
  bad[1].add_tensors();
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kInvalidArgument, "host b",
                     "compact form's tables");
  bad = good;
  for (int i = 0; i < 2 * RequestLimits().max_tensors_per_plan + 1; ++i) bad[1].add_regions();
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kResourceExhausted, "host b",
                     "--max_tensors_per_plan");
  bad = good;
  v1::Box* box = bad[0].mutable_regions(0)->mutable_box();
  for (int d = 0; d < 100; ++d) box->add_lengths(1);
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kResourceExhausted, "--max_dims");
  // A rank on two hosts, or twice on one, or negative.
  bad = good;
  rank_of(bad[1], 3).set_rank(0);
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kInvalidArgument,
                     "rank 0 on host b appears twice");
  bad = good;
  rank_of(bad[0], 1).set_rank(-1);
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kInvalidArgument,
                     "rank -1 on host a is negative");
  // A tensor the checkpoint does not hold, and one asked with another dtype.
  bad = good;
  bad[0].mutable_tensors(0)->set_fqn("l9.w");
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kNotFound, "tensor l9.w");
  bad = good;
  bad[1].mutable_tensors(2)->set_dtype(v1::FLOAT32);
  CKPT_REQUIRE_ERROR(PlanLoad(manifest, bad), absl::StatusCode::kInvalidArgument, "rank 2",
                     "asks for dtype FLOAT32");
}

TEST_CASE("compacting a load checks the device buffers it drops", "[compact_plan]") {
  std::vector<v1::NodeLoadPlan> nodes = LoadSpelled();
  v1::DeviceBuffer* buffer = nodes[0].mutable_ranks(1)->mutable_tensors(3)->mutable_device_buffer();
  buffer->set_allocation_bytes(256 * 2);  // exactly the range
  CKPT_REQUIRE_OK(CompactLoadPlan(nodes[0], RequestLimits()));
  nodes = LoadSpelled();
  buffer = nodes[0].mutable_ranks(1)->mutable_tensors(3)->mutable_device_buffer();
  buffer->set_allocation_bytes(256 * 2 - 1);
  CKPT_REQUIRE_ERROR(PlanLoad(Saved(), nodes), absl::StatusCode::kInvalidArgument, "rank 1",
                     "tensor emb", "outside its allocation");
}

}  // namespace
}  // namespace ckpt::planning
