// Planning on several threads (parallel_for.h) gives what one thread gives:
// the same save assignment message for message, and the same answer from
// the manifest check, its first error included, whichever part of the
// tensors a thread checked.
#include <google/protobuf/util/message_differencer.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/parallel_for.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/save_planner.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT
using google::protobuf::util::MessageDifferencer;

TEST_CASE("ParallelFor covers every index once, on several threads when it may", "[parallel_for]") {
  for (const auto& [n, threads, min] : std::vector<std::tuple<size_t, int, size_t>>{
           {0, 4, 1}, {1, 4, 1}, {7, 3, 1}, {1000, 4, 10}, {1000, 4, 600}, {1000, 1, 1}}) {
    INFO(n << " indices, " << threads << " threads, at least " << min << " each");
    std::vector<std::atomic<int>> seen(n);
    std::mutex mu;
    std::set<std::thread::id> ids;
    int calls = 0;
    std::vector<std::pair<size_t, size_t>> bounds;  // by range
    const size_t returned =
        ParallelFor(n, threads, n, min, [&](size_t range, size_t begin, size_t end) {
          {
            std::lock_guard<std::mutex> lock(mu);
            ids.insert(std::this_thread::get_id());
            ++calls;
            if (bounds.size() <= range) bounds.resize(range + 1);
            bounds[range] = {begin, end};
          }
          CHECK(begin <= end);
          for (size_t i = begin; i < end; ++i) seen[i].fetch_add(1);
        });
    for (size_t i = 0; i < n; ++i) CHECK(seen[i].load() == 1);
    const size_t ranges = std::min<size_t>(threads, std::max<size_t>(1, n / min));
    CHECK(calls == static_cast<int>(ranges));
    CHECK(ids.size() == ranges);  // each range on its own thread
    // Range k is the k-th from the start.
    CHECK(returned == ranges);
    REQUIRE(bounds.size() == ranges);
    for (size_t k = 0; k < ranges; ++k) {
      CHECK(bounds[k].first == (k == 0 ? 0 : bounds[k - 1].second));
    }
    CHECK(bounds.back().second == n);
  }
  CHECK(PlanningThreads(3) == 3);
  CHECK(PlanningThreads(0) >= 1);
  CHECK(PlanningThreads(0) <= kDefaultPlanningThreadsMax);
}

constexpr int kTensors = 1000;
constexpr int kParts = 40;

int64_t Columns(int t) { return 8 + 8 * (t % 5); }

// 40 parts of each of 1000 tensors, each part on 2 ranks of different
// hosts, and a few objects: 40,000 items, enough for the planner and the
// check to cut them among threads.
std::vector<v1::NodeSavePlan> ClusterPlans(int tensors = kTensors) {
  constexpr int kHosts = 20;
  constexpr int kRanksPerHost = 4;
  static_assert(kParts == kHosts * kRanksPerHost / 2);
  std::vector<v1::NodeSavePlan> nodes;
  for (int h = 0; h < kHosts; ++h) {
    std::vector<int> ranks;
    for (int k = 0; k < kRanksPerHost; ++k) ranks.push_back(h * kRanksPerHost + k);
    nodes.push_back(Node(absl::StrCat("host", h), kHosts * kRanksPerHost, 3, ranks));
    for (int r : ranks) {
      const int part = r % kParts;
      for (int t = 0; t < tensors; ++t) {
        // Sizes differ by tensor, so the balance has choices to make.
        const int64_t columns = Columns(t);
        AddShard(nodes.back(), r,
                 BoxShard(absl::StrCat("layer.", t), v1::FLOAT32, {4 * kParts, columns},
                          {4 * part, 0}, {4, columns}));
      }
      *RankOf(nodes.back(), r).add_objects() = Object(absl::StrCat("rng.", r), false, 40 + r);
    }
  }
  *RankOf(nodes.front(), 0).add_objects() = Object("config", true, 5000);
  return nodes;
}

SavePlannerOptions OnThreads(int threads) {
  SavePlannerOptions options;
  options.chunk_bytes = 4096;
  options.threads = threads;
  return options;
}

TEST_CASE("a save plan is the same on one thread and on several", "[parallel_for]") {
  const std::vector<v1::NodeSavePlan> nodes = ClusterPlans();
  absl::StatusOr<v1::SaveAssignment> one = PlanSave(nodes, OnThreads(1));
  CKPT_REQUIRE_OK(one);
  REQUIRE(one->manifest_template().tensors_size() == 1000);
  // The 1,000 tensors are stored alike but for their 5 widths: 5 layouts
  // of 40 regions.
  REQUIRE(one->manifest_template().shard_layouts_size() == 5);
  for (const v1::ShardLayout& layout : one->manifest_template().shard_layouts()) {
    REQUIRE(layout.regions_size() == kParts);
  }
  for (int threads : {2, 3, 8}) {
    INFO(threads << " threads");
    absl::StatusOr<std::shared_ptr<const v1::SaveAssignment>> many =
        PlanSaveShared(nodes, OnThreads(threads));
    CKPT_REQUIRE_OK(many);
    CHECK(MessageDifferencer::Equals(*one, **many));
  }
}

TEST_CASE("a save plan cut into an odd number of ranges is the same as on one thread",
          "[parallel_for]") {
  // 120,000 items: 3 and 7 ranges of items to order, merged pairwise with
  // one left over at a level (AssignWriters).
  const std::vector<v1::NodeSavePlan> nodes = ClusterPlans(3 * kTensors);
  absl::StatusOr<v1::SaveAssignment> one = PlanSave(nodes, OnThreads(1));
  CKPT_REQUIRE_OK(one);
  for (int threads : {3, 7}) {
    INFO(threads << " threads");
    absl::StatusOr<v1::SaveAssignment> many = PlanSave(nodes, OnThreads(threads));
    CKPT_REQUIRE_OK(many);
    CHECK(MessageDifferencer::Equals(*one, *many));
  }
}

// The plan's manifest, checked on `threads` threads.
absl::Status Check(const v1::CheckpointManifest& m, int threads) {
  ManifestLimits limits;
  return ValidateManifest(m, m.job(), m.step(), "MANIFEST", limits, threads);
}

TEST_CASE("the manifest check answers alike on any number of threads", "[parallel_for]") {
  absl::StatusOr<v1::SaveAssignment> a = PlanSave(ClusterPlans(), OnThreads(1));
  CKPT_REQUIRE_OK(a);
  const v1::CheckpointManifest valid = planning::ManifestOf(*a);
  for (int threads : {1, 2, 4}) {
    const absl::Status s = Check(valid, threads);
    INFO(threads << " threads: " << s);
    CHECK(s.ok());
  }

  const auto same_answer = [](const v1::CheckpointManifest& m, const std::string& names) {
    const absl::Status serial = Check(m, 1);
    CHECK(serial.code() == absl::StatusCode::kDataLoss);
    INFO(serial);
    CHECK(serial.message().find(names) != absl::string_view::npos);
    for (int threads : {2, 4, 7}) {
      INFO(threads << " threads");
      CHECK(Check(m, threads) == serial);
    }
  };
  SECTION("of two broken tensors far apart, the first is named") {
    v1::CheckpointManifest m = valid;
    m.mutable_tensors(930)->mutable_shards(3)->mutable_chunks(0)->set_shard_offset(8);
    m.mutable_tensors(40)->mutable_shards(5)->mutable_chunks(0)->set_length(0);
    same_answer(m, absl::StrCat("\"", m.tensors(40).fqn(), "\" shard 5 chunk 0 is empty"));
  }
  SECTION("a broken tensor among the last is found") {
    v1::CheckpointManifest m = valid;
    m.mutable_tensors(999)->mutable_shards(39)->mutable_chunks(0)->set_shard_offset(8);
    same_answer(m, absl::StrCat("\"", m.tensors(999).fqn(), "\" shard 39 chunk 0 starts at"));
  }
  SECTION("chunks of tensors checked by different threads may not share bytes") {
    v1::CheckpointManifest m = valid;
    const v1::StoredChunk first = m.tensors(2).shards(0).chunks(0);
    v1::StoredChunk* last = m.mutable_tensors(990)->mutable_shards(0)->mutable_chunks(0);
    last->set_file(first.file());
    last->set_file_offset(first.file_offset());
    same_answer(m, "overlap in");
  }
  SECTION("counts are bounded before the tensors are cut among threads") {
    ManifestLimits limits;
    limits.max_shards = 39999;
    for (int threads : {1, 4}) {
      const absl::Status s =
          ValidateManifest(valid, valid.job(), valid.step(), "MANIFEST", limits, threads);
      CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
      INFO(s);
      CHECK(s.message().find("40000 shards, more than the limit of 39999") !=
            absl::string_view::npos);
    }
  }
}

// A load in another layout: 20 hosts of 4 ranks, each rank asking for one
// half of the columns of one part of every tensor (80,000 distinct
// regions, enough for the planner to cut them among threads).
std::vector<v1::NodeLoadPlan> ReshardedLoad() {
  std::vector<v1::NodeLoadPlan> nodes;
  for (int h = 0; h < 20; ++h) {
    Requests requests;
    for (int r = 4 * h; r < 4 * h + 4; ++r) {
      const int part = (r / 2) % kParts;
      const int half = r % 2;
      for (int t = 0; t < kTensors; ++t) {
        const int64_t columns = Columns(t) / 2;
        requests[r].push_back(BoxShard(absl::StrCat("layer.", t), v1::FLOAT32,
                                       {4 * kParts, Columns(t)}, {4 * part, half * columns},
                                       {4, columns}));
      }
    }
    nodes.push_back(LoadNode(absl::StrCat("reader", h), requests));
  }
  return nodes;
}

TEST_CASE("a load plan is the same on one thread and on several", "[parallel_for]") {
  absl::StatusOr<v1::SaveAssignment> saved = PlanSave(ClusterPlans(), OnThreads(1));
  CKPT_REQUIRE_OK(saved);
  const v1::CheckpointManifest manifest = planning::ManifestOf(*saved);
  const std::vector<v1::NodeLoadPlan> nodes = ReshardedLoad();
  absl::StatusOr<v1::LoadAssignment> one = PlanLoad(manifest, nodes, RequestLimits{}, 1);
  CKPT_REQUIRE_OK(one);
  REQUIRE(one->reads_size() == kTensors * kParts);  // every stored chunk once
  for (int threads : {2, 3, 8}) {
    INFO(threads << " threads");
    absl::StatusOr<v1::LoadAssignment> many = PlanLoad(manifest, nodes, RequestLimits{}, threads);
    CKPT_REQUIRE_OK(many);
    CHECK(MessageDifferencer::Equals(*one, *many));
  }

  SECTION("of two stored shards whose chunks do not tile them, the first asked for is named") {
    v1::CheckpointManifest broken = manifest;
    // Tensors are in name order, so layer.100 is checked by the first of
    // two threads and layer.9 by the second; ranks ask in layer order, so
    // layer.9 is the first asked for.
    const auto index_of = [&](const std::string& fqn) {
      for (int t = 0; t < broken.tensors_size(); ++t) {
        if (broken.tensors(t).fqn() == fqn) return t;
      }
      FAIL("no tensor " << fqn);
      return -1;
    };
    REQUIRE(index_of("layer.100") < kTensors / 2);
    REQUIRE(index_of("layer.9") >= kTensors / 2);
    for (const char* fqn : {"layer.100", "layer.9"}) {
      broken.mutable_tensors(index_of(fqn))->mutable_shards(3)->mutable_chunks(0)->set_length(1);
    }
    const absl::Status serial = PlanLoad(broken, nodes, RequestLimits{}, 1).status();
    INFO(serial);
    CHECK(serial.code() == absl::StatusCode::kDataLoss);
    CHECK(serial.message().find("tensor layer.9 shard 3") != absl::string_view::npos);
    for (int threads : {2, 4}) {
      INFO(threads << " threads");
      CHECK(PlanLoad(broken, nodes, RequestLimits{}, threads).status() == serial);
    }
  }
}

}  // namespace
}  // namespace ckpt::planning
