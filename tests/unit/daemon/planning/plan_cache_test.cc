// The save plan cache: an unchanged layout reuses the assignment with the
// new step and metadata stamped in, equal to what planning would give; any
// change of layout plans afresh; what may change is still validated; and
// the cache stays within its bytes.
#include "daemon/planning/plan_cache.h"

#include <google/protobuf/util/message_differencer.h>

#include <string>
#include <vector>

#include "daemon/planning/planned_manifest.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

// Two DP ranks with a replica each and a TP split, on two hosts.
std::vector<v1::NodeSavePlan> Layout(int64_t step, const std::string& job = "job") {
  v1::NodeSavePlan a = Node("h0", 4, 2, {0, 1}, job, step);
  v1::NodeSavePlan b = Node("h1", 4, 2, {2, 3}, job, step);
  for (int r = 0; r < 4; ++r) {
    v1::NodeSavePlan& host = r < 2 ? a : b;
    AddShard(host, r, Whole("embed", v1::FLOAT32, {64, 32}));
    AddShard(host, r, BoxShard("proj", v1::BFLOAT16, {128, 64}, {(r % 2) * 64, 0}, {64, 64}));
  }
  return {a, b};
}

bool Same(const google::protobuf::Message& x, const google::protobuf::Message& y) {
  return google::protobuf::util::MessageDifferencer::Equals(x, y);
}

// The assignment as this save commits it: the shared plan with its step
// and metadata.
v1::SaveAssignment Stamped(const SavePlan& plan) {
  v1::SaveAssignment out = *plan.assignment;
  *out.mutable_manifest_template() = plan.Manifest();
  return out;
}

// A fresh plan with its manifest whole, as Stamped makes the cached one's.
v1::SaveAssignment Committed(const v1::SaveAssignment& fresh) {
  v1::SaveAssignment out = fresh;
  *out.mutable_manifest_template() = planning::ManifestOf(fresh);
  return out;
}

TEST_CASE("an unchanged layout reuses the plan, with the new step and metadata", "[plan_cache]") {
  SavePlanCache cache;
  bool hit = true;
  auto first = cache.Plan(Layout(10), PlannerOptions(), &hit);
  REQUIRE(first.ok());
  CHECK_FALSE(hit);
  std::vector<v1::NodeSavePlan> next = Layout(20);
  (*next[0].mutable_user_metadata())["lr"] = "0.1";
  auto second = cache.Plan(next, PlannerOptions(), &hit);
  REQUIRE(second.ok());
  CHECK(hit);
  // Exactly what planning from scratch gives.
  auto fresh = PlanSave(next, PlannerOptions());
  REQUIRE(fresh.ok());
  CHECK(Same(Stamped(*second), Committed(*fresh)));
  CHECK(second->Manifest().step() == 20);
  CHECK(second->Manifest().user_metadata().at("lr") == "0.1");
  // Shared with the cache, not copied; the first save's manifest unchanged.
  CHECK(second->assignment == first->assignment);
  CHECK(first->Manifest().step() == 10);
  CHECK(first->Manifest().user_metadata().empty());
  const PlanCacheStats stats = cache.Stats();
  CHECK(stats.hits == 1);
  CHECK(stats.misses == 1);
  CHECK(stats.jobs == 1);
}

TEST_CASE("any change of layout plans afresh", "[plan_cache]") {
  SavePlanCache cache;
  REQUIRE(cache.Plan(Layout(1), PlannerOptions()).ok());
  auto changed = [&](std::vector<v1::NodeSavePlan> nodes, const char* what) {
    bool hit = true;
    auto plan = cache.Plan(nodes, PlannerOptions(), &hit);
    INFO(what);
    REQUIRE(plan.ok());
    CHECK_FALSE(hit);
    auto fresh = PlanSave(nodes, PlannerOptions());
    REQUIRE(fresh.ok());
    CHECK(Same(Stamped(*plan), Committed(*fresh)));
    REQUIRE(cache.Plan(Layout(1), PlannerOptions()).ok());  // back to the original
  };
  std::vector<v1::NodeSavePlan> nodes = Layout(2);
  AddShard(nodes[1], 3, Whole("extra", v1::INT32, {7}));
  changed(nodes, "a new shard");
  nodes = Layout(2);
  nodes[0].set_writer_threads(3);
  changed(nodes, "more writer threads");
  nodes = Layout(2);
  nodes[1].mutable_host()->set_host("h9");
  changed(nodes, "another host");
  nodes = Layout(2);
  *RankOf(nodes[0], 1).mutable_shards(1) =
      BoxShard("proj", v1::BFLOAT16, {128, 64}, {0, 0}, {64, 64});
  changed(nodes, "a shard moved");
  // Another job with the same layout has its own entry.
  bool hit = true;
  REQUIRE(cache.Plan(Layout(2, "other"), PlannerOptions(), &hit).ok());
  CHECK_FALSE(hit);
}

TEST_CASE("what may change is still validated on a hit", "[plan_cache]") {
  SavePlanCache cache;
  REQUIRE(cache.Plan(Layout(1), PlannerOptions()).ok());
  std::vector<v1::NodeSavePlan> bad = Layout(-4);
  auto negative = cache.Plan(bad, PlannerOptions());
  CHECK(negative.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(negative.status().message()).find("negative") != std::string::npos);
  bad = Layout(3);
  bad[1].set_step(4);  // hosts disagree on the step
  CHECK(cache.Plan(bad, PlannerOptions()).status().code() == absl::StatusCode::kInvalidArgument);
  bad = Layout(3);
  SavePlannerOptions tight = PlannerOptions();
  tight.limits.max_user_metadata_bytes = 8;
  (*bad[0].mutable_user_metadata())["note"] = std::string(100, 'x');
  CHECK_FALSE(cache.Plan(bad, tight).ok());
}

TEST_CASE("the key covers every field of a node's plan but step and metadata", "[plan_cache]") {
  // A field added to these messages must be added to the key (KeyOf), or
  // plans that differ in it would share an assignment.
  auto names = [](const google::protobuf::Descriptor* d) {
    std::vector<std::string> out;
    for (int i = 0; i < d->field_count(); ++i) out.push_back(d->field(i)->name());
    return out;
  };
  CHECK(names(v1::NodeSavePlan::descriptor()) ==
        std::vector<std::string>{"host", "job", "step", "world_size", "writer_threads", "partial",
                                 "ranks", "user_metadata", "compact", "tensors", "regions",
                                 "tier"});
  CHECK(names(v1::TensorDesc::descriptor()) ==
        std::vector<std::string>{"fqn", "dtype", "global_shape"});
  CHECK(names(v1::HostIdentity::descriptor()) ==
        std::vector<std::string>{"host", "address", "failure_domain"});
  CHECK(names(v1::RankSavePlan::descriptor()) ==
        std::vector<std::string>{"rank", "shards", "objects", "shard_tensors", "shard_regions"});
  CHECK(names(v1::TensorShard::descriptor()) ==
        std::vector<std::string>{"fqn", "dtype", "global_shape", "region", "device_buffer"});
  CHECK(names(v1::Region::descriptor()) == std::vector<std::string>{"box", "flat"});
  CHECK(names(v1::Box::descriptor()) == std::vector<std::string>{"offsets", "lengths"});
  CHECK(names(v1::FlatRange::descriptor()) == std::vector<std::string>{"begin", "end"});
  CHECK(names(v1::DeviceBuffer::descriptor()) ==
        std::vector<std::string>{"ipc_handle", "offset", "allocation_bytes", "device"});
  CHECK(names(v1::ObjectDesc::descriptor()) == std::vector<std::string>{"key", "global", "length"});
}

TEST_CASE("the key is a digest: small, equal for equal plans, not for others", "[plan_cache]") {
  const std::string key = PlanKey(Layout(1));
  CHECK(key.size() == 32);
  CHECK(PlanKey(Layout(7)) == key);  // the step is not part of it
  // Fields that differ only in where a length ends: the encoding keeps
  // them apart.
  std::vector<v1::NodeSavePlan> a = Layout(1);
  std::vector<v1::NodeSavePlan> b = Layout(1);
  a[0].mutable_host()->set_host("h0x");
  a[0].mutable_host()->set_address("");
  b[0].mutable_host()->set_host("h0");
  b[0].mutable_host()->set_address("x");
  CHECK(PlanKey(a) != PlanKey(b));
  // A large value and a negative one.
  b = Layout(1);
  b[0].set_writer_threads(1 << 30);
  CHECK(PlanKey(b) != key);
  b[0].set_writer_threads(-1);
  CHECK(PlanKey(b) != key);
}

TEST_CASE("the plans' key is their hosts' keys digested in order", "[plan_cache]") {
  // Replicas, objects and a device buffer.
  std::vector<v1::NodeSavePlan> plans = Layout(3);
  *RankOf(plans[1], 3).add_objects() = Object("opt", false, 100);
  *RankOf(plans[0], 0).add_objects() = Object("rng", true, 8);
  *RankOf(plans[1], 2).add_objects() = Object("rng", true, 8);
  RankOf(plans[0], 1).mutable_shards(0)->mutable_device_buffer()->set_allocation_bytes(1 << 20);
  REQUIRE(plans.size() >= 2);
  std::vector<std::string> host_keys;
  for (const v1::NodeSavePlan& node : plans) host_keys.push_back(HostPlanKey(node));
  CHECK(host_keys[0] != host_keys[1]);
  CHECK(PlanKeyOfHosts(host_keys) == PlanKey(plans));
  CHECK(PlanKeyOfHosts(host_keys) != PlanKey(Layout(3)));
  // Order, count and every host's key count; an empty one is no key.
  std::vector<std::string> swapped = host_keys;
  std::swap(swapped[0], swapped[1]);
  CHECK(PlanKeyOfHosts(swapped) != PlanKeyOfHosts(host_keys));
  CHECK(PlanKeyOfHosts(absl::MakeConstSpan(host_keys).subspan(1)) != PlanKeyOfHosts(host_keys));
  swapped = host_keys;
  swapped[1].clear();
  CHECK(PlanKeyOfHosts(swapped).empty());

  // Keys digested as the plans arrived find the job's plan; a host's
  // changed key misses.
  SavePlanCache cache;
  bool hit = false;
  CKPT_REQUIRE_OK(cache.Plan(plans, host_keys, PlannerOptions(), &hit));
  CHECK_FALSE(hit);
  for (v1::NodeSavePlan& node : plans) node.set_step(4);
  CKPT_REQUIRE_OK(cache.Plan(plans, host_keys, PlannerOptions(), &hit));
  CHECK(hit);
  CKPT_REQUIRE_OK(cache.Plan(plans, PlannerOptions(), &hit));  // digests them itself
  CHECK(hit);
  std::vector<std::string> other = host_keys;
  other[1] = HostPlanKey(Layout(4, "other")[1]);
  CKPT_REQUIRE_OK(cache.Plan(plans, other, PlannerOptions(), &hit));
  CHECK_FALSE(hit);
  // A key per host, or the plan is refused.
  CHECK(cache.Plan(plans, absl::MakeConstSpan(host_keys).subspan(1), PlannerOptions())
            .status()
            .code() == absl::StatusCode::kInternal);
}

TEST_CASE("the cache keeps within its bytes, dropping the least recently used job",
          "[plan_cache]") {
  SavePlanCache probe;
  REQUIRE(probe.Plan(Layout(1), PlannerOptions()).ok());
  const uint64_t entry = probe.Stats().bytes;  // one job's key and assignment
  REQUIRE(entry > 0);
  // Room for two jobs' entries, not three.
  SavePlanCache cache(entry * 5 / 2);
  REQUIRE(cache.Plan(Layout(1, "a"), PlannerOptions()).ok());
  REQUIRE(cache.Plan(Layout(1, "b"), PlannerOptions()).ok());
  REQUIRE(cache.Plan(Layout(2, "a"), PlannerOptions()).ok());  // a is now the most recent
  REQUIRE(cache.Plan(Layout(1, "c"), PlannerOptions()).ok());  // evicts b
  CHECK(cache.Stats().bytes <= entry * 5 / 2);
  CHECK(cache.Stats().jobs == 2);
  bool hit = false;
  REQUIRE(cache.Plan(Layout(3, "a"), PlannerOptions(), &hit).ok());
  CHECK(hit);
  REQUIRE(cache.Plan(Layout(3, "b"), PlannerOptions(), &hit).ok());
  CHECK_FALSE(hit);
}

}  // namespace
}  // namespace ckpt::planning
