// A save plan keeps each shard's item, not its chunks (planned_manifest.h):
// the manifest ManifestOf cuts from it is the one the commit writes, its
// size as the planner counted it, and the plan's checks refuse what the
// manifest's would.
#include "daemon/planning/planned_manifest.h"

#include <google/protobuf/util/message_differencer.h>

#include <string>
#include <vector>

#include "daemon/planning/manifest_check.h"
#include "daemon/planning/save_planner.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT
using google::protobuf::util::MessageDifferencer;

// Two hosts of two ranks, two writer files each: a tensor split in rows
// (shards of 2 to 3 chunks), one replicated whole on every rank, an empty
// one, and objects.
std::vector<v1::NodeSavePlan> Hosts() {
  v1::NodeSavePlan a = Node("h0", 4, 2, {0, 1});
  v1::NodeSavePlan b = Node("h1", 4, 2, {2, 3});
  for (int r = 0; r < 4; ++r) {
    v1::NodeSavePlan& host = r < 2 ? a : b;
    AddShard(host, r, BoxShard("rows", v1::FLOAT32, {40, 250}, {10 * r, 0}, {10, 250}));
    AddShard(host, r, Whole("bias", v1::BFLOAT16, {3000}));
    AddShard(host, r, Whole("empty", v1::FLOAT32, {0}));
    *RankOf(host, r).add_objects() = Object("loader", false, 100 + r);
  }
  *RankOf(a, 0).add_objects() = Object("hparams", true, 5000);
  return {a, b};
}

TEST_CASE("a plan keeps each shard's item; ManifestOf cuts its chunks as the commit writes them",
          "[planned_manifest]") {
  absl::StatusOr<v1::SaveAssignment> plan = PlanSave(Hosts(), PlannerOptions());
  CKPT_REQUIRE_OK(plan);
  const v1::CheckpointManifest& kept = plan->manifest_template();
  // Each tensor names a layout of its shards' regions: "bias" and "empty"
  // are each one whole shard, stored alike.
  int shards = 0;
  for (const v1::TensorEntry& tensor : kept.tensors()) {
    CHECK(tensor.shards().empty());
    REQUIRE(tensor.layout() >= 1);
    REQUIRE(tensor.layout() <= static_cast<uint32_t>(kept.shard_layouts_size()));
    shards += kept.shard_layouts(static_cast<int>(tensor.layout() - 1)).regions_size();
  }
  REQUIRE(shards == 4 + 1 + 1);
  CHECK(kept.shard_layouts_size() == 2);
  REQUIRE(plan->shard_hosts_size() == shards);
  REQUIRE(plan->shard_items_size() == shards);
  CHECK(kept.objects_size() == 5);  // objects keep their chunk: one each

  const v1::CheckpointManifest whole = ManifestOf(*plan);
  CKPT_REQUIRE_OK(ValidateManifest(whole, "job", 5, "MANIFEST"));
  int i = 0;
  int chunks = 0;
  for (int t = 0; t < whole.tensors_size(); ++t) {
    const v1::TensorEntry& tensor = whole.tensors(t);
    for (int s = 0; s < tensor.shards_size(); ++s, ++i) {
      const v1::StoredShard& shard = tensor.shards(s);
      INFO(tensor.fqn() << " shard " << s);
      const v1::HostAssignment& host = plan->hosts(static_cast<int>(plan->shard_hosts(i)));
      const v1::WriteItem& item = host.items(static_cast<int>(plan->shard_items(i)));
      CHECK_FALSE(item.is_object());
      CHECK(item.rank() == shard.writer_rank());
      // The region is the one kept; the chunks tile the item's bytes, in
      // its file, at its offset.
      const v1::ShardLayout& layout =
          kept.shard_layouts(static_cast<int>(kept.tensors(t).layout() - 1));
      CHECK(MessageDifferencer::Equals(shard.region(), layout.regions(s)));
      uint64_t offset = 0;
      for (const v1::StoredChunk& chunk : shard.chunks()) {
        CHECK(chunk.file() == host.files(item.writer()));
        CHECK(chunk.shard_offset() == offset);
        CHECK(chunk.file_offset() == item.file_offset() + offset);
        CHECK(chunk.length() == std::min<uint64_t>(4096, item.bytes() - offset));
        CHECK(chunk.crc32c() == 0);  // the commit fills it in
        offset += chunk.length();
        ++chunks;
      }
      CHECK(offset == item.bytes());
      // What the planner counted for the chunks is what they take.
      v1::StoredShard bare = shard;
      bare.clear_chunks();
      CHECK(shard.ByteSizeLong() - bare.ByteSizeLong() ==
            PlannedChunksWireBytes(item.bytes(), item.file_offset(),
                                   host.files(item.writer()).size(), 4096));
    }
  }
  CHECK(chunks == 4 * 3 + 2 + 0);  // 10,000 bytes a row shard, 6,000 the bias, none empty
  // Alike on any number of threads; the objects as planned.
  CHECK(MessageDifferencer::Equals(whole, ManifestOf(*plan, 3)));
  REQUIRE(whole.objects_size() == kept.objects_size());
  for (int o = 0; o < kept.objects_size(); ++o) {
    CHECK(MessageDifferencer::Equals(whole.objects(o), kept.objects(o)));
  }
}

TEST_CASE("ManifestOf is the template with each shard's chunks, every other field as kept",
          "[planned_manifest]") {
  std::vector<v1::NodeSavePlan> nodes = Hosts();
  (*nodes[0].mutable_user_metadata())["lr"] = "0.1";
  nodes[0].set_partial(true);
  nodes[1].set_partial(true);
  absl::StatusOr<v1::SaveAssignment> plan = PlanSave(nodes, PlannerOptions());
  CKPT_REQUIRE_OK(plan);
  v1::SaveAssignment stamped = *plan;
  v1::CheckpointManifest& kept = *stamped.mutable_manifest_template();
  kept.set_created_unix_ms(1700000000000);
  kept.set_delta_base_step(3);
  kept.set_delta_ordinal(1);
  // The manifest as the planner made it before it kept layouts: the
  // template with each tensor's shards listed, each with its layout's
  // region, its item's rank and the item's chunks.
  v1::CheckpointManifest expected = kept;
  expected.clear_shard_layouts();
  int i = 0;
  for (v1::TensorEntry& tensor : *expected.mutable_tensors()) {
    const v1::ShardLayout& layout = kept.shard_layouts(static_cast<int>(tensor.layout() - 1));
    tensor.clear_layout();
    for (const v1::Region& region : layout.regions()) {
      const v1::HostAssignment& host = plan->hosts(static_cast<int>(plan->shard_hosts(i)));
      const v1::WriteItem& item = host.items(static_cast<int>(plan->shard_items(i++)));
      v1::StoredShard& shard = *tensor.add_shards();
      *shard.mutable_region() = region;
      shard.set_writer_rank(item.rank());
      AddPlannedChunks(item, host.files(item.writer()), 4096, shard);
    }
  }
  REQUIRE(i == plan->shard_hosts_size());
  CHECK(MessageDifferencer::Equals(ManifestOf(stamped), expected));
  // Its bytes, made a tensor at a time, parse to the same message, as long.
  const std::string bytes = SerializedManifestOf(stamped);
  v1::CheckpointManifest parsed;
  REQUIRE(parsed.ParseFromString(bytes));
  CHECK(MessageDifferencer::Equals(parsed, expected));
  CHECK(bytes.size() == expected.ByteSizeLong());
  CHECK(PlannedManifestBytes(stamped) == expected.ByteSizeLong());
  // ManifestOf copies a tensor entry field by field: one added to the
  // message must be added there (and here). The four past the fifth are a
  // compact root's (compact_root.h); of them a template uses the layout,
  // which ManifestOf lists as shards.
  CHECK(v1::TensorEntry::descriptor()->field_count() == 9);
}

TEST_CASE("ManifestOf leaves a template that lists its chunks as it is", "[planned_manifest]") {
  absl::StatusOr<v1::SaveAssignment> plan = PlanSave(Hosts(), PlannerOptions());
  CKPT_REQUIRE_OK(plan);
  v1::SaveAssignment sent;  // as a node is sent it: the manifest whole
  *sent.mutable_manifest_template() = ManifestOf(*plan);
  CHECK(MessageDifferencer::Equals(ManifestOf(sent), sent.manifest_template()));
}

TEST_CASE("the plan's manifest bound is the manifest's, to the byte", "[planned_manifest]") {
  absl::StatusOr<v1::SaveAssignment> plan = PlanSave(Hosts(), PlannerOptions());
  CKPT_REQUIRE_OK(plan);
  // The manifest as committed: each chunk's CRC, 6 bytes with its tag at
  // most, counted too (the commit fills them in).
  int chunks = 0;
  const v1::CheckpointManifest whole = ManifestOf(*plan);
  for (const v1::HostAssignment& host : plan->hosts()) {
    for (const v1::WriteItem& item : host.items()) {
      chunks += item.is_object() ? 1 : static_cast<int>((item.bytes() + 4095) / 4096);
    }
  }
  const uint64_t bytes = whole.ByteSizeLong() + 6 * static_cast<uint64_t>(chunks);
  SavePlannerOptions options = PlannerOptions();
  options.manifest_limits.max_manifest_bytes = bytes;
  CKPT_REQUIRE_OK(PlanSave(Hosts(), options));
  options.manifest_limits.max_manifest_bytes = bytes - 1;
  CKPT_REQUIRE_ERROR(PlanSave(Hosts(), options), absl::StatusCode::kResourceExhausted,
                     absl::StrCat("needs a manifest of about ", bytes, " bytes"));
  // Its footprint while read, measured on its bytes when they could reach
  // the bound: refused when they do, planned when they do not.
  options = PlannerOptions();
  options.manifest_limits.max_memory_bytes = bytes;
  CKPT_REQUIRE_ERROR(PlanSave(Hosts(), options), absl::StatusCode::kResourceExhausted,
                     "cannot be loaded");
  options.manifest_limits.max_memory_bytes = 100 * bytes;  // over 1/256th: measured
  CKPT_REQUIRE_OK(PlanSave(Hosts(), options));
}

TEST_CASE("a planned manifest is held to the manifest's limits", "[planned_manifest]") {
  absl::StatusOr<v1::SaveAssignment> plan = PlanSave(Hosts(), PlannerOptions());
  CKPT_REQUIRE_OK(plan);
  ManifestLimits limits;
  CKPT_REQUIRE_OK(ValidatePlannedManifest(*plan, 14, 4096, "plan", limits, 1));
  SECTION("chunks past the bound, the objects' counted too") {
    limits.max_chunks = 14 + 5 - 1;
    CKPT_REQUIRE_ERROR(ValidatePlannedManifest(*plan, 14, 4096, "plan", limits, 2),
                       absl::StatusCode::kFailedPrecondition, "19 chunks", "limit of 18");
  }
  SECTION("a chunk past the bound") {
    limits.max_chunk_bytes = 4095;
    CKPT_REQUIRE_ERROR(ValidatePlannedManifest(*plan, 14, 4096, "plan", limits, 1),
                       absl::StatusCode::kDataLoss, "a chunk is 4096 bytes", "limit of 4095");
  }
  SECTION("a file name outside the step directory") {
    plan->mutable_hosts(1)->set_files(0, "../elsewhere.bin");
    CKPT_REQUIRE_ERROR(ValidatePlannedManifest(*plan, 14, 4096, "plan", limits, 1),
                       absl::StatusCode::kDataLoss, "elsewhere.bin");
  }
  SECTION("a planned shard that lists chunks") {
    *plan->mutable_manifest_template() = ManifestOf(*plan);
    CKPT_REQUIRE_ERROR(ValidatePlannedManifest(*plan, 14, 4096, "plan", limits, 1),
                       absl::StatusCode::kDataLoss, "lists planned chunks");
  }
  SECTION("a tensor naming a layout the template does not hold") {
    v1::TensorEntry& rows = *plan->mutable_manifest_template()->mutable_tensors(2);
    rows.set_layout(7);
    CKPT_REQUIRE_ERROR(ValidatePlannedManifest(*plan, 14, 4096, "plan", limits, 1),
                       absl::StatusCode::kDataLoss, "rows", "names layout 7 of 2");
  }
  SECTION("a layout's region outside a tensor that names it") {
    // The bias's layout (one whole region) named by the 4-shard "rows".
    v1::CheckpointManifest& kept = *plan->mutable_manifest_template();
    kept.mutable_shard_layouts(static_cast<int>(kept.tensors(2).layout() - 1))
        ->mutable_regions(3)
        ->mutable_box()
        ->set_lengths(0, 11);
    CKPT_REQUIRE_ERROR(ValidatePlannedManifest(*plan, 14, 4096, "plan", limits, 1),
                       absl::StatusCode::kDataLoss, "rows", "shard 3");
  }
  SECTION("what the manifest's check refuses of the rest") {
    // Rows 10 to 40 of 40 outside a tensor of 20 rows.
    v1::TensorEntry& rows = *plan->mutable_manifest_template()->mutable_tensors(2);
    REQUIRE(rows.fqn() == "rows");
    rows.set_global_shape(0, 20);
    CKPT_REQUIRE_ERROR(ValidatePlannedManifest(*plan, 14, 4096, "plan", limits, 1),
                       absl::StatusCode::kDataLoss, "rows");
  }
}

}  // namespace
}  // namespace ckpt::planning
