// A manifest in columns (column_manifest.h, column_manifest_read.h): a
// compact split read straight into columns holds what the manifest holds,
// every field a load uses; a load planned from it is the load planned from
// the joined manifest; and the read refuses exactly the splits that the
// join and ValidateManifest refuse, over thousands of crafted edits.
#include "daemon/planning/column_manifest.h"

#include <google/protobuf/util/message_differencer.h>

#include <random>
#include <string>
#include <vector>

#include "daemon/planning/column_manifest_read.h"
#include "daemon/planning/compact_root.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/split_helpers.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using testing::BoxShard;
using testing::Crafted;
using testing::CraftedTable;
using testing::FullManifest;
using testing::LoadNode;
using testing::ReaderOf;
using testing::Tables;

absl::StatusOr<std::shared_ptr<const ColumnManifest>> ReadColumns(const std::string& root,
                                                                  const Tables& tables,
                                                                  const v1::CheckpointManifest& m,
                                                                  const ManifestLimits& limits = {},
                                                                  int* reads = nullptr) {
  ManifestFootprint footprint;
  absl::StatusOr<v1::CheckpointManifest> decoded =
      DecodeBoundedManifest(root, "MANIFEST", limits, &footprint);
  if (!decoded.ok()) return decoded.status();
  return ReadColumnManifest(*std::move(decoded), footprint, root.size(), m.job(), m.step(),
                            "MANIFEST", limits, ReaderOf(tables, reads));
}

// The joined manifest, validated, as the catalog read it before columns.
absl::StatusOr<v1::CheckpointManifest> JoinAndCheck(const std::string& root, const Tables& tables,
                                                    const v1::CheckpointManifest& m) {
  ManifestFootprint footprint;
  absl::StatusOr<v1::CheckpointManifest> joined =
      DecodeBoundedManifest(root, "MANIFEST", {}, &footprint);
  if (!joined.ok()) return joined.status();
  if (absl::Status s =
          JoinChunkTables(*joined, footprint, root.size(), "MANIFEST", {}, ReaderOf(tables));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateManifest(*joined, m.job(), m.step(), "MANIFEST"); !s.ok()) return s;
  return joined;
}

std::string DifferenceFrom(const ColumnManifest& columns, const v1::CheckpointManifest& m) {
  absl::StatusOr<std::shared_ptr<const ColumnManifest>> expected = ColumnManifest::FromManifest(m);
  REQUIRE(expected.ok());
  return columns.Difference(**expected);
}

TEST_CASE("a split read into columns holds what the manifest holds", "[column_manifest]") {
  const v1::CheckpointManifest m = FullManifest();
  REQUIRE(ValidateManifest(m, m.job(), m.step(), "MANIFEST").ok());
  for (const uint32_t format : {kCompactRootFormatVersion, kSplitManifestFormatVersion}) {
    INFO("root format " << format);
    std::optional<SplitManifestFiles> files = SplitManifest(m, {}, format);
    REQUIRE(files.has_value());
    int reads = 0;
    absl::StatusOr<std::shared_ptr<const ColumnManifest>> columns =
        ReadColumns(files->root, files->tables, m, {}, &reads);
    REQUIRE(columns.ok());
    CHECK(reads == 1);  // the tables are small: one read of TABLES
    CHECK(DifferenceFrom(**columns, m).empty());
    CHECK((*columns)->chunks() > 100);
    CHECK((*columns)->layouts().size() < 4);  // the layers share their layout
  }
  // A format-1 manifest, read as the catalog reads one.
  absl::StatusOr<std::shared_ptr<const ColumnManifest>> whole =
      ReadColumns(EncodeManifest(m), {}, m);
  REQUIRE(whole.ok());
  CHECK(DifferenceFrom(**whole, m).empty());
  // The comparison itself sees a changed chunk.
  v1::CheckpointManifest other = m;
  other.mutable_tensors(2)->mutable_shards(1)->mutable_chunks(0)->set_file_offset(7);
  CHECK(!DifferenceFrom(**whole, other).empty());
}

TEST_CASE("a load planned from the columns read is the load planned from the joined manifest",
          "[column_manifest]") {
  const v1::CheckpointManifest m = FullManifest();
  std::optional<SplitManifestFiles> files = SplitManifest(m, {});
  REQUIRE(files.has_value());
  absl::StatusOr<std::shared_ptr<const ColumnManifest>> columns =
      ReadColumns(files->root, files->tables, m);
  REQUIRE(columns.ok());
  // Rows across the stored shards' boundaries, a column band, the whole.
  testing::Requests requests;
  for (int t = 0; t < 6; ++t) {
    const std::string fqn = absl::StrCat("layers.", t, ".w");
    requests[0].push_back(BoxShard(fqn, v1::FLOAT32, {64, 300}, {8, 0}, {33, 300}));
    requests[1].push_back(BoxShard(fqn, v1::FLOAT32, {64, 300}, {0, 17}, {64, 101}));
    requests[2].push_back(BoxShard(fqn, v1::FLOAT32, {64, 300}, {0, 0}, {64, 300}));
  }
  const std::vector<v1::NodeLoadPlan> nodes = {LoadNode("a", requests, {{0, {"rng"}}})};
  absl::StatusOr<v1::LoadAssignment> joined = PlanLoad(m, nodes, RequestLimits{});
  REQUIRE(joined.ok());
  absl::StatusOr<std::shared_ptr<GlobalLoad>> global =
      PlanGlobalLoad(*columns, nodes, RequestLimits{});
  REQUIRE(global.ok());
  v1::LoadAssignment from_columns;
  (*global)->ToAssignment(from_columns);
  CHECK(joined->reads_size() > 50);
  CHECK(google::protobuf::util::MessageDifferencer::Equals(*joined, from_columns));
}

// One crafted edit of a split, drawn from `random`: a value of a table's
// column (the table's root entry made to match), or a field of the root.
void Edit(std::mt19937& random, SplitManifestFiles& files, std::string& label) {
  const auto pick = [&](uint64_t n) { return static_cast<uint64_t>(random() % n); };
  const uint32_t index = static_cast<uint32_t>(1 + pick(files.tables.size()));
  if (pick(3) != 0) {
    files.root = CraftedTable(files, files.tables, index, [&](v1::ChunkTable& t) {
      const int row = static_cast<int>(pick(t.shard_size()));
      const int other = static_cast<int>(pick(t.shard_size()));
      const auto value = [&](uint64_t was, uint64_t elsewhere) -> uint64_t {
        switch (pick(6)) {
          case 0:
            return 0;
          case 1:
            return was + 1;
          case 2:
            return was - 1;
          case 3:
            return elsewhere;
          case 4:
            return uint64_t{1} << 62;
          default:
            return was * 2;
        }
      };
      switch (pick(7)) {
        case 0:
          label = "shard";
          t.set_shard(row, static_cast<uint32_t>(value(t.shard(row), t.shard(other))));
          break;
        case 1:
          label = "file_offset";
          t.set_file_offset(row, value(t.file_offset(row), t.file_offset(other)));
          break;
        case 2:
          label = "shard_offset";
          t.set_shard_offset(row, value(t.shard_offset(row), t.shard_offset(other)));
          break;
        case 3:
          label = "length";
          t.set_length(row, value(t.length(row), t.length(other)));
          break;
        case 4:
          label = "crc32c";
          t.set_crc32c(row, t.crc32c(row) + 1);
          break;
        case 5:
          label = "stored_length";
          if (t.stored_length_size() > 0) {
            t.set_stored_length(row, value(t.stored_length(row), t.stored_length(other)));
          }
          break;
        default:
          label = "rows swapped";
          t.mutable_shard()->SwapElements(row, other);
          t.mutable_file_offset()->SwapElements(row, other);
          break;
      }
    });
    return;
  }
  files.root = Crafted(files, [&](v1::CheckpointManifest& r) {
    v1::TensorEntry& tensor = *r.mutable_tensors(static_cast<int>(pick(r.tensors_size())));
    const int shards = tensor.shard_tables_size();
    switch (pick(8)) {
      case 0:
        label = "shard table";
        if (shards > 0) tensor.set_shard_tables(static_cast<int>(pick(shards)), pick(5));
        break;
      case 1:
        label = "shard chunk count";
        if (shards > 0) tensor.set_shard_chunk_counts(static_cast<int>(pick(shards)), pick(7));
        break;
      case 2:
        label = "layout region";
        if (r.shard_layouts_size() > 0) {
          v1::Box& box = *r.mutable_shard_layouts(0)->mutable_regions(0)->mutable_box();
          if (box.lengths_size() > 0) box.set_lengths(0, box.lengths(0) + 1 - pick(3));
        }
        break;
      case 3:
        label = "dtype";
        tensor.set_dtype(v1::BFLOAT16);
        break;
      case 4:
        label = "shape";
        if (tensor.global_shape_size() > 0) tensor.set_global_shape(0, 65);
        break;
      case 5:
        label = "fqn";
        tensor.set_fqn(r.tensors(0).fqn());
        break;
      case 6:
        label = "object place";
        if (r.objects_size() > 0) {
          v1::StoredChunk& chunk = *r.mutable_objects(0)->mutable_chunk();
          chunk.set_file(r.chunk_tables(0).file());
          chunk.set_file_offset(pick(2) == 0 ? 0 : 4096 * pick(8));
        }
        break;
      default:
        label = "layout";
        tensor.set_layout(static_cast<uint32_t>(pick(r.shard_layouts_size() + 2)));
        break;
    }
  });
}

TEST_CASE("a split's columns are refused exactly where its join and its check refuse it",
          "[column_manifest]") {
  const v1::CheckpointManifest m = FullManifest();
  const std::optional<SplitManifestFiles> good = SplitManifest(m, {});
  REQUIRE(good.has_value());
  std::mt19937 random(20261130);
  int refused = 0;
  int taken = 0;
  for (int round = 0; round < 1500; ++round) {
    SplitManifestFiles files = *good;
    std::string label;
    const int edits = 1 + static_cast<int>(random() % 2);
    for (int e = 0; e < edits; ++e) Edit(random, files, label);
    INFO("round " << round << ", last edit: " << label);
    absl::StatusOr<v1::CheckpointManifest> joined = JoinAndCheck(files.root, files.tables, m);
    absl::StatusOr<std::shared_ptr<const ColumnManifest>> columns =
        ReadColumns(files.root, files.tables, m);
    INFO("joined: " << joined.status() << "; columns: " << columns.status());
    REQUIRE(joined.ok() == columns.ok());
    if (!joined.ok()) {
      ++refused;
      // Each says what is wrong in the same terms: a damaged file, or a
      // limit (a hostile count).
      CHECK(columns.status().code() == joined.status().code());
      continue;
    }
    ++taken;
    CHECK(DifferenceFrom(**columns, *joined).empty());
  }
  CHECK(refused > 500);
  CHECK(taken > 100);
}

TEST_CASE("a columns read refuses what the limits forbid before it parses a table",
          "[column_manifest]") {
  const v1::CheckpointManifest m = FullManifest();
  const std::optional<SplitManifestFiles> files = SplitManifest(m, {});
  REQUIRE(files.has_value());
  // Memory is checked for the whole read before the first table, and for
  // each table's parse once its bytes are in (`max_reads` 1).
  const auto refused = [&](const ManifestLimits& limits, const std::string& says,
                           int max_reads = 0) {
    int reads = 0;
    absl::StatusOr<std::shared_ptr<const ColumnManifest>> columns =
        ReadColumns(files->root, files->tables, m, limits, &reads);
    INFO(says << ": " << columns.status());
    CHECK(absl::IsFailedPrecondition(columns.status()));
    CHECK(columns.status().message().find(says) != std::string::npos);
    CHECK(reads <= max_reads);
  };
  ManifestLimits few_chunks;
  few_chunks.max_chunks = 10;
  refused(few_chunks, "--max_manifest_chunks");
  ManifestLimits few_bytes;
  few_bytes.max_manifest_bytes = files->root.size() + 8;
  refused(few_bytes, "--max_manifest_bytes");
  ManifestLimits little_memory;
  little_memory.max_memory_bytes = 16 << 10;
  refused(little_memory, "--max_manifest_memory_bytes", 1);
  ManifestLimits few_shards;
  few_shards.max_shards = 3;
  refused(few_shards, "--max_manifest_shards");
  // A root that claims 2^31 chunks in one table: refused by count, with
  // nothing allocated for them.
  const std::string claims = Crafted(*files, [](v1::CheckpointManifest& r) {
    r.mutable_chunk_tables(0)->set_chunks(uint64_t{1} << 31);
  });
  absl::StatusOr<std::shared_ptr<const ColumnManifest>> columns =
      ReadColumns(claims, files->tables, m);
  CHECK(absl::IsFailedPrecondition(columns.status()));
}

}  // namespace
}  // namespace ckpt::planning
