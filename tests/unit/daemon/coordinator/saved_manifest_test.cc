// The manifest a save commits (saved_manifest.h): split as it is made from
// the plan, it is the very bytes the whole manifest split gives; the whole
// is made where a chunk is encoded or the caller wants it; a missing
// checksum is refused either way.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "daemon/coordinator/saved_manifest.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "daemon/planning/plan_cache.h"
#include "daemon/planning/save_planner.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

using planning::testing::AddShard;
using planning::testing::BoxShard;
using planning::testing::Node;
using planning::testing::Object;
using planning::testing::RankOf;
using planning::testing::Whole;

constexpr int64_t kCreated = 1700000000123;

// Two hosts of two ranks: row shards of two tensors stored alike, a whole
// tensor, an empty one, and objects.
planning::SavePlan Plan() {
  v1::NodeSavePlan a = Node("h0", 4, 2, {0, 1});
  v1::NodeSavePlan b = Node("h1", 4, 2, {2, 3});
  for (int r = 0; r < 4; ++r) {
    v1::NodeSavePlan& host = r < 2 ? a : b;
    for (const char* name : {"w1", "w2"}) {
      AddShard(host, r, BoxShard(name, v1::FLOAT32, {40, 250}, {10 * r, 0}, {10, 250}));
    }
    AddShard(host, r, Whole("bias", v1::BFLOAT16, {3000}));
    AddShard(host, r, Whole("empty", v1::FLOAT32, {0}));
    *RankOf(host, r).add_objects() = Object("loader", false, 100 + r);
  }
  (*a.mutable_user_metadata())["lr"] = "0.1";
  planning::SavePlannerOptions options = planning::testing::PlannerOptions();
  planning::SavePlanCache cache;
  absl::StatusOr<planning::SavePlan> plan = cache.Plan({a, b}, options);
  REQUIRE(plan.ok());
  // A later step's save of the cached plan. (One metadata entry: a map's
  // order on the wire is the map's, not the same for every copy.)
  plan->step = 9;
  plan->user_metadata["lr"] = "0.2";
  return *plan;
}

// Each host's report: a CRC per chunk that needs one, distinct.
std::map<std::string, v1::NodePersistReport> Reports(const planning::SavePlan& plan) {
  std::map<std::string, v1::NodePersistReport> reports;
  const v1::CheckpointManifest manifest = plan.Manifest();
  uint32_t crc = 1000;
  REQUIRE(planning::ForEachChunk(manifest, [&](const v1::StoredChunk& chunk, const std::string&) {
            if (!planning::SaveChunkNeedsChecksum(chunk)) return absl::OkStatus();
            // Files are named after their host (data/h0-0.bin).
            v1::ChunkChecksum* sum = reports[chunk.file().substr(5, 2)].add_checksums();
            sum->set_file(chunk.file());
            sum->set_file_offset(chunk.file_offset());
            sum->set_crc32c(crc++);
            return absl::OkStatus();
          }).ok());
  REQUIRE(reports.size() == 2);
  return reports;
}

// The manifest the commit wrote before it split as it made it: the whole,
// each chunk's CRC put in.
v1::CheckpointManifest Whole(const planning::SavePlan& plan,
                             const std::map<std::string, v1::NodePersistReport>& reports) {
  std::map<std::pair<std::string, uint64_t>, const v1::ChunkChecksum*> sums;
  for (const auto& [host, report] : reports) {
    for (const v1::ChunkChecksum& c : report.checksums()) sums[{c.file(), c.file_offset()}] = &c;
  }
  v1::CheckpointManifest manifest = plan.Manifest();
  manifest.set_created_unix_ms(kCreated);
  REQUIRE(planning::ForEachMutableChunk(manifest, [&](v1::StoredChunk& chunk, const std::string&) {
            auto it = sums.find({chunk.file(), chunk.file_offset()});
            if (it == sums.end()) return absl::OkStatus();
            const v1::ChunkChecksum& sum = *it->second;
            chunk.set_crc32c(sum.crc32c());
            if (sum.codec() != v1::CHUNK_CODEC_NONE) {
              chunk.set_codec(sum.codec());
              chunk.set_stored_length(sum.stored_length());
              chunk.set_stored_crc32c(sum.stored_crc32c());
              chunk.set_element_bytes(sum.element_bytes());
            }
            return absl::OkStatus();
          }).ok());
  return manifest;
}

ManifestWriting Split() { return {.split_min_chunks = 1, .limits = {}}; }

TEST_CASE("a save's manifest split as it is made is the whole manifest's split",
          "[saved_manifest]") {
  const planning::SavePlan plan = Plan();
  REQUIRE(plan.assignment->shard_hosts_size() > 0);  // the template lists no shards
  const auto reports = Reports(plan);
  const v1::CheckpointManifest whole = Whole(plan, reports);
  REQUIRE(whole.tensors_size() == 4);
  REQUIRE(whole.step() == 9);
  REQUIRE(whole.user_metadata().at("lr") == "0.2");
  // What the memory tier holds room for, counted without making it.
  CHECK(plan.ManifestBytes() == plan.Manifest().ByteSizeLong());

  absl::StatusOr<ManifestFiles> files = SavedManifest(plan, kCreated, reports, Split());
  CKPT_REQUIRE_OK(files);
  CHECK(files->job == "job");
  CHECK(files->step == 9);
  std::optional<planning::SplitManifestFiles> expected =
      planning::SplitManifest(whole, planning::ManifestLimits());
  REQUIRE(expected.has_value());
  CHECK(files->manifest == expected->root);
  REQUIRE(files->tables.has_value());
  CHECK(*files->tables == absl::StrJoin(expected->tables, ""));

  SECTION("too few chunks to split: the whole, in format 1") {
    ManifestWriting writing = Split();
    writing.split_min_chunks = 1u << 30;
    absl::StatusOr<ManifestFiles> joined = SavedManifest(plan, kCreated, reports, writing);
    CKPT_REQUIRE_OK(joined);
    CHECK_FALSE(joined->tables.has_value());
    CHECK(joined->manifest == planning::EncodeManifest(whole));
  }
  SECTION("the memory tier's commit: the whole serialized too, and split") {
    std::string serialized;
    absl::StatusOr<ManifestFiles> both =
        SavedManifest(plan, kCreated, reports, Split(), &serialized);
    CKPT_REQUIRE_OK(both);
    CHECK(serialized == whole.SerializeAsString());
    CHECK(both->manifest == expected->root);
    CHECK(both->tables == files->tables);
  }
}

TEST_CASE("a save's manifest with an encoded chunk is made whole and checked", "[saved_manifest]") {
  const planning::SavePlan plan = Plan();
  auto reports = Reports(plan);
  v1::ChunkChecksum& sum = *reports.begin()->second.mutable_checksums(1);
  sum.set_codec(v1::CHUNK_CODEC_ZSTD);
  sum.set_stored_length(100);
  sum.set_stored_crc32c(77);
  sum.set_element_bytes(4);
  const v1::CheckpointManifest whole = Whole(plan, reports);
  std::optional<planning::SplitManifestFiles> expected =
      planning::SplitManifest(whole, planning::ManifestLimits());
  REQUIRE(expected.has_value());
  absl::StatusOr<ManifestFiles> files = SavedManifest(plan, kCreated, reports, Split());
  CKPT_REQUIRE_OK(files);
  CHECK(files->manifest == expected->root);
  CHECK(files->tables == absl::StrJoin(expected->tables, ""));
  // Past what loading accepts once encoded: refused.
  ManifestWriting small = Split();
  small.limits.max_manifest_bytes = whole.ByteSizeLong() - 1;
  CKPT_REQUIRE_ERROR(SavedManifest(plan, kCreated, reports, small),
                     absl::StatusCode::kResourceExhausted, "--max_manifest_bytes");
  // An encoding a manifest read back would refuse.
  sum.set_stored_length(1u << 30);
  CKPT_REQUIRE_ERROR(SavedManifest(plan, kCreated, reports, Split()), absl::StatusCode::kDataLoss,
                     "encoded bytes");
}

TEST_CASE("a save's manifest missing a chunk's checksum is refused naming it", "[saved_manifest]") {
  const planning::SavePlan plan = Plan();
  for (const bool split : {true, false}) {
    INFO((split ? "split as made" : "whole"));
    for (const int dropped : {0, 5}) {
      auto reports = Reports(plan);
      v1::NodePersistReport& report = reports.rbegin()->second;
      REQUIRE(report.checksums_size() > dropped);
      const v1::ChunkChecksum gone = report.checksums(dropped);
      report.mutable_checksums()->DeleteSubrange(dropped, 1);
      ManifestWriting writing = Split();
      if (!split) writing.split_min_chunks = 0;
      CKPT_REQUIRE_ERROR(SavedManifest(plan, kCreated, reports, writing),
                         absl::StatusCode::kInternal, "no checksum reported for " + gone.file(),
                         "at offset " + std::to_string(gone.file_offset()));
    }
  }
}

}  // namespace
}  // namespace ckpt::coordinator
