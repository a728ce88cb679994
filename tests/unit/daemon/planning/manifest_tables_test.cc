// Split manifests (manifest_tables.h): a split and a join give back the
// manifest, every field of it; and a root and tables that disagree, are
// damaged, missing or too large are refused, naming the table, before
// anything is allocated for what they claim.
#include "daemon/planning/manifest_tables.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/message_differencer.h>

#include <map>
#include <string>

#include "daemon/planning/compact_root.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/save_planner.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/split_helpers.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using testing::AddShard;
using testing::BoxShard;
using testing::Crafted;
using testing::CraftedTable;
using testing::FullManifest;
using testing::Node;
using testing::ReaderOf;
using testing::Tables;

absl::StatusOr<v1::CheckpointManifest> Join(const std::string& root, const Tables& tables,
                                            const ManifestLimits& limits = {},
                                            int* reads = nullptr) {
  ManifestFootprint footprint;
  absl::StatusOr<v1::CheckpointManifest> m =
      DecodeBoundedManifest(root, "MANIFEST", limits, &footprint);
  if (!m.ok()) return m.status();
  if (absl::Status s =
          JoinChunkTables(*m, footprint, root.size(), "MANIFEST", limits, ReaderOf(tables, reads));
      !s.ok()) {
    return s;
  }
  return m;
}

bool Same(const v1::CheckpointManifest& a, const v1::CheckpointManifest& b) {
  google::protobuf::util::MessageDifferencer differ;
  std::string diff;
  differ.ReportDifferencesToString(&diff);
  const bool same = differ.Compare(a, b);
  UNSCOPED_INFO(diff.substr(0, 2000));
  return same;
}

TEST_CASE("a split manifest joins back to every field of the manifest", "[manifest_tables]") {
  const v1::CheckpointManifest m = FullManifest();
  INFO(ValidateManifest(m, m.job(), m.step(), "planned"));
  REQUIRE(ValidateManifest(m, m.job(), m.step(), "planned").ok());
  // The test manifest sets every field a split moves: one added to the
  // format and not to the split fails here.
  for (const google::protobuf::Descriptor* type :
       {v1::CheckpointManifest::descriptor(), v1::TensorEntry::descriptor(),
        v1::StoredShard::descriptor(), v1::StoredChunk::descriptor()}) {
    for (int f = 0; f < type->field_count(); ++f) {
      const std::string name = type->field(f)->full_name();
      if (name == "ckpt.v1.StoredShard.table" || name == "ckpt.v1.StoredShard.chunk_count" ||
          name == "ckpt.v1.CheckpointManifest.chunk_tables" ||
          name == "ckpt.v1.CheckpointManifest.shard_layouts" ||
          name == "ckpt.v1.TensorEntry.layout" || name == "ckpt.v1.TensorEntry.shard_tables" ||
          name == "ckpt.v1.TensorEntry.shard_chunk_counts" ||
          name == "ckpt.v1.TensorEntry.shard_writer_ranks") {
        continue;  // a split's own
      }
      const google::protobuf::FieldDescriptor* field = type->field(f);
      const auto is_set = [field](const google::protobuf::Message& msg) {
        const google::protobuf::Reflection* r = msg.GetReflection();
        return field->is_repeated() ? r->FieldSize(msg, field) > 0 : r->HasField(msg, field);
      };
      bool set = type == v1::CheckpointManifest::descriptor() && is_set(m);
      for (const v1::TensorEntry& t : m.tensors()) {
        if (type == v1::TensorEntry::descriptor()) set = set || is_set(t);
        for (const v1::StoredShard& shard : t.shards()) {
          if (type == v1::StoredShard::descriptor()) set = set || is_set(shard);
          for (const v1::StoredChunk& c : shard.chunks()) {
            if (type == v1::StoredChunk::descriptor()) set = set || is_set(c);
          }
        }
      }
      INFO(name);
      CHECK(set);
    }
  }

  // Compact (as written now) and format 2 (as earlier versions wrote it).
  const uint32_t format = GENERATE(kCompactRootFormatVersion, kSplitManifestFormatVersion);
  INFO("root format " << format);
  std::optional<SplitManifestFiles> files = SplitManifest(m, {}, format);
  REQUIRE(files.has_value());
  CHECK(files->tables.size() == 4);  // two hosts, two files each
  // The root lists no tensor chunk: each shard names its table.
  absl::StatusOr<v1::CheckpointManifest> root = DecodeManifest(files->root, "MANIFEST");
  REQUIRE(root.ok());
  CHECK(root->format_version() == format);
  CHECK(root->chunk_tables_size() == 4);
  if (format == kCompactRootFormatVersion) {
    // The six layers share one layout, the empty tensor has its own; no
    // shard is listed, each is a value in three columns.
    CHECK(root->shard_layouts_size() == 2);
    for (const v1::TensorEntry& t : root->tensors()) {
      CHECK(t.shards_size() == 0);
      CHECK(t.layout() != 0);
      CHECK(t.shard_tables_size() == root->shard_layouts(t.layout() - 1).regions_size());
    }
  } else {
    CHECK(root->shard_layouts_size() == 0);
    for (const v1::TensorEntry& t : root->tensors()) {
      CHECK(t.layout() == 0);
      for (const v1::StoredShard& s : t.shards()) CHECK(s.chunks_size() == 0);
    }
  }
  // Unjoined, it is no manifest a reader takes.
  CHECK(absl::IsDataLoss(ValidateManifest(*root, m.job(), m.step(), "MANIFEST")));

  const Tables tables = files->tables;
  absl::StatusOr<v1::CheckpointManifest> joined = Join(files->root, tables);
  REQUIRE(joined.ok());
  CHECK(Same(*joined, m));
  const absl::Status valid = ValidateManifest(*joined, m.job(), m.step(), "MANIFEST");
  INFO(valid);
  CHECK(valid.ok());
}

TEST_CASE("regions set empty or unset come back as they were", "[manifest_tables]") {
  // A layout lists regions, so a set but empty one is kept; an unset one
  // (no writer leaves one so) makes the split write a format-2 root.
  v1::CheckpointManifest m = FullManifest();
  m.mutable_tensors(1)->mutable_shards(0)->mutable_region()->Clear();
  for (const bool unset : {false, true}) {
    if (unset) m.mutable_tensors(2)->mutable_shards(1)->clear_region();
    std::optional<SplitManifestFiles> files = SplitManifest(m, {});
    REQUIRE(files.has_value());
    absl::StatusOr<v1::CheckpointManifest> root = DecodeManifest(files->root, "MANIFEST");
    REQUIRE(root.ok());
    CHECK(root->format_version() ==
          (unset ? kSplitManifestFormatVersion : kCompactRootFormatVersion));
    absl::StatusOr<v1::CheckpointManifest> joined = Join(files->root, files->tables);
    REQUIRE(joined.ok());
    CHECK(joined->tensors(1).shards(0).has_region());
    CHECK(joined->tensors(2).shards(1).has_region() == !unset);
    CHECK(Same(*joined, m));
  }
}

TEST_CASE("a format-1 manifest is left as it is", "[manifest_tables]") {
  const v1::CheckpointManifest m = FullManifest();
  const std::string bytes = EncodeManifest(m);
  int reads = 0;
  absl::StatusOr<v1::CheckpointManifest> joined = Join(bytes, {}, {}, &reads);
  REQUIRE(joined.ok());
  CHECK(reads == 0);
  CHECK(Same(*joined, m));
}

TEST_CASE("a shard over two files or no chunk at all is not split", "[manifest_tables]") {
  v1::CheckpointManifest m = FullManifest();
  v1::StoredShard* shard = m.mutable_tensors(1)->mutable_shards(0);
  REQUIRE(shard->chunks_size() > 1);
  shard->mutable_chunks(1)->set_file("data/elsewhere.bin");
  CHECK_FALSE(SplitManifest(m, {}).has_value());
  CHECK_FALSE(SplitManifest(testing::ManifestOf("job", 1, "", 4096), {}).has_value());
}

TEST_CASE("every damaged byte of a chunk table is refused, naming it", "[manifest_tables]") {
  const v1::CheckpointManifest m = FullManifest();
  std::optional<SplitManifestFiles> files = SplitManifest(m, {});
  REQUIRE(files.has_value());
  const Tables good = files->tables;
  for (size_t at = 0; at < good[1].size(); ++at) {
    Tables bad = good;
    bad[1][at] = static_cast<char>(bad[1][at] ^ 0x20);
    absl::StatusOr<v1::CheckpointManifest> joined = Join(files->root, bad);
    INFO("byte " << at);
    REQUIRE(absl::IsDataLoss(joined.status()));
    CHECK(joined.status().message().find(ChunkTableName(2)) != std::string::npos);
  }
  absl::StatusOr<v1::CheckpointManifest> joined = Join(files->root, {});
  CHECK(absl::IsNotFound(joined.status()));
  CHECK(joined.status().message().find("TABLES") != std::string::npos);
  Tables truncated = good;
  truncated.back().pop_back();
  CHECK(absl::IsDataLoss(Join(files->root, truncated).status()));
  // Tables in another order (the same bytes in all): each is checked
  // against its own entry.
  Tables swapped = good;
  std::swap(swapped[0], swapped[2]);
  CHECK(absl::IsDataLoss(Join(files->root, swapped).status()));
}

TEST_CASE("a root and tables that disagree are refused", "[manifest_tables]") {
  const v1::CheckpointManifest m = FullManifest();
  // A format-2 root, whose shards are messages to edit (a compact root's
  // own checks are below).
  std::optional<SplitManifestFiles> files = SplitManifest(m, {}, kSplitManifestFormatVersion);
  REQUIRE(files.has_value());
  const Tables good = files->tables;
  const auto lost = [&](const std::string& root, const Tables& tables, const std::string& says) {
    absl::StatusOr<v1::CheckpointManifest> joined = Join(root, tables);
    INFO(joined.status());
    CHECK(absl::IsDataLoss(joined.status()));
    CHECK(joined.status().message().find(says) != std::string::npos);
  };
  lost(Crafted(*files,
               [](v1::CheckpointManifest& r) {
                 r.mutable_tensors(1)->mutable_shards(0)->set_table(9);
               }),
       good, "names chunk table 9");
  lost(Crafted(*files,
               [](v1::CheckpointManifest& r) {
                 r.mutable_tensors(1)->mutable_shards(0)->set_chunk_count(1000000000);
               }),
       good, "chunks in chunk table");
  lost(Crafted(*files,
               [](v1::CheckpointManifest& r) {
                 r.mutable_tensors(1)->mutable_shards(0)->add_chunks()->set_length(1);
               }),
       good, "lists chunks in a split manifest's root");
  lost(Crafted(*files, [](v1::CheckpointManifest& r) { r.clear_chunk_tables(); }), good,
       "no chunk table");
  lost(Crafted(*files,
               [](v1::CheckpointManifest& r) { r.mutable_chunk_tables(0)->set_file("data/x"); }),
       good, "of another file");
  {
    // A row moved to a shard of another table.
    SplitManifestFiles crafted = *files;
    Tables tables = good;
    const std::string root = CraftedTable(
        crafted, tables, 1, [&](v1::ChunkTable& t) { t.set_shard(0, t.shard(0) + 1000); });
    lost(root, tables, "which the root does not put in this table");
  }
  {
    // A column one value short.
    SplitManifestFiles crafted = *files;
    Tables tables = good;
    const std::string root = CraftedTable(
        crafted, tables, 1, [](v1::ChunkTable& t) { t.mutable_length()->RemoveLast(); });
    lost(root, tables, "column length");
  }
  {
    // Joined, the chunks are checked as any manifest's: a row that moves
    // a chunk onto another's bytes gets through the join, not the check.
    SplitManifestFiles crafted = *files;
    Tables tables = good;
    const std::string root =
        CraftedTable(crafted, tables, 1, [](v1::ChunkTable& t) { t.set_file_offset(1, 0); });
    absl::StatusOr<v1::CheckpointManifest> joined = Join(root, tables);
    REQUIRE(joined.ok());
    CHECK(absl::IsDataLoss(ValidateManifest(*joined, m.job(), m.step(), "MANIFEST")));
  }
  // A format-1 manifest that names tables is refused by the check.
  v1::CheckpointManifest named = m;
  named.mutable_tensors(1)->mutable_shards(0)->set_table(1);
  CHECK(absl::IsDataLoss(ValidateManifest(named, m.job(), m.step(), "MANIFEST")));
}

TEST_CASE("a compact root's expansion takes no more memory than its check allowed",
          "[manifest_tables]") {
  const v1::CheckpointManifest m = FullManifest();
  std::optional<SplitManifestFiles> files = SplitManifest(m, {});
  REQUIRE(files.has_value());
  absl::StatusOr<v1::CheckpointManifest> root = DecodeManifest(files->root, "MANIFEST");
  REQUIRE(root.ok());
  absl::StatusOr<uint64_t> allowed = CheckCompactRoot(*root, "MANIFEST", {});
  REQUIRE(allowed.ok());
  const uint64_t before = root->SpaceUsedLong();
  ExpandCompactRoot(*root);
  CHECK(root->format_version() == kSplitManifestFormatVersion);
  CHECK(root->shard_layouts_size() == 0);
  // What the shards' messages use, their slots beside: within the
  // estimate, and not far below it (an estimate is no use if it refuses
  // what fits).
  const uint64_t used = root->SpaceUsedLong() - before;
  INFO("used " << used << ", allowed " << *allowed);
  CHECK(used <= *allowed);
  CHECK(*allowed <= 3 * used);
}

TEST_CASE("a compact root that does not hold together is refused", "[manifest_tables]") {
  const v1::CheckpointManifest m = FullManifest();
  std::optional<SplitManifestFiles> files = SplitManifest(m, {});
  REQUIRE(files.has_value());
  const Tables good = files->tables;
  const auto lost = [&](const std::string& says, auto edit) {
    int reads = 0;
    absl::StatusOr<v1::CheckpointManifest> joined = Join(Crafted(*files, edit), good, {}, &reads);
    INFO(joined.status());
    CHECK(absl::IsDataLoss(joined.status()));
    CHECK(joined.status().message().find(says) != std::string::npos);
  };
  lost("lists shards in a compact root",
       [](v1::CheckpointManifest& r) { r.mutable_tensors(2)->add_shards()->set_table(1); });
  lost("names shard layout 9",
       [](v1::CheckpointManifest& r) { r.mutable_tensors(2)->set_layout(9); });
  lost("writer ranks for the 4 shards of its layout", [](v1::CheckpointManifest& r) {
    r.mutable_tensors(2)->mutable_shard_writer_ranks()->RemoveLast();
  });
  lost("chunk counts and",
       [](v1::CheckpointManifest& r) { r.mutable_tensors(2)->add_shard_chunk_counts(1); });
  lost("tensor \"layers.5.w\" has 4 tables, 4 chunk counts and 4 writer ranks for the 0 shards",
       [](v1::CheckpointManifest& r) { r.mutable_tensors(6)->set_layout(0); });
  // Expanded, a shard's column values meet the format-2 checks.
  lost("names chunk table 9",
       [](v1::CheckpointManifest& r) { r.mutable_tensors(1)->set_shard_tables(0, 9); });
  lost("chunks in chunk table", [](v1::CheckpointManifest& r) {
    r.mutable_tensors(1)->set_shard_chunk_counts(0, 1000000000);
  });
  // A layout other tensors share, pointed at by one more: its shards'
  // chunks are not where the tables put them.
  lost("chunks in chunk table", [](v1::CheckpointManifest& r) {
    *r.add_tensors() = r.tensors(1);
    r.mutable_tensors(r.tensors_size() - 1)->set_fqn("copy");
  });
  // Outside a compact root, a layout or its columns are refused by the
  // check: nothing would check the shards they describe.
  v1::CheckpointManifest with_layouts = m;
  with_layouts.add_shard_layouts();
  CHECK(absl::IsDataLoss(ValidateManifest(with_layouts, m.job(), m.step(), "MANIFEST")));
  v1::CheckpointManifest with_columns = m;
  with_columns.mutable_tensors(1)->add_shard_tables(1);
  CHECK(absl::IsDataLoss(ValidateManifest(with_columns, m.job(), m.step(), "MANIFEST")));
  // A format-2 root with a layout is joined as format 2, and refused then.
  std::optional<SplitManifestFiles> old = SplitManifest(m, {}, kSplitManifestFormatVersion);
  REQUIRE(old.has_value());
  const std::string mixed = Crafted(*old, [](v1::CheckpointManifest& r) {
    r.mutable_tensors(1)->set_layout(1);
    r.add_shard_layouts();
  });
  absl::StatusOr<v1::CheckpointManifest> joined = Join(mixed, old->tables);
  REQUIRE(joined.ok());
  CHECK(absl::IsDataLoss(ValidateManifest(*joined, m.job(), m.step(), "MANIFEST")));
}

TEST_CASE("the limits hold before any table is read", "[manifest_tables]") {
  const v1::CheckpointManifest m = FullManifest();
  std::optional<SplitManifestFiles> files = SplitManifest(m, {});
  REQUIRE(files.has_value());
  const Tables good = files->tables;
  int64_t chunks = 0;
  (void)ForEachChunk(m, [&](const v1::StoredChunk&, const std::string&) {
    ++chunks;
    return absl::OkStatus();
  });
  const auto refused = [&](const ManifestLimits& limits, const std::string& flag,
                           const std::string& root = "") {
    int reads = 0;
    absl::StatusOr<v1::CheckpointManifest> joined =
        Join(root.empty() ? files->root : root, good, limits, &reads);
    INFO(joined.status());
    CHECK(absl::IsFailedPrecondition(joined.status()));
    CHECK(joined.status().message().find(flag) != std::string::npos);
    CHECK(reads == 0);
  };
  ManifestLimits few_chunks;
  few_chunks.max_chunks = chunks - m.objects_size() - 1;
  refused(few_chunks, "--max_manifest_chunks");
  ManifestLimits few_bytes;
  few_bytes.max_manifest_bytes = files->root.size() + 100;
  refused(few_bytes, "--max_manifest_bytes");
  ManifestLimits little_memory;
  little_memory.max_memory_bytes = 32 << 10;
  refused(little_memory, "--max_manifest_memory_bytes");
  // A compact root's shards, a few bytes each on disk, are counted and
  // their memory allowed before one is made: a crafted root whose ten
  // thousand tensors each name a layout of 1,000 regions holds 2 million
  // shards, three bytes each on disk and some 200 in memory.
  ManifestLimits few_shards;
  few_shards.max_shards = 24;  // the manifest has 6 x 4 + 1
  refused(few_shards, "--max_manifest_shards");
  const std::string expanding = Crafted(*files, [](v1::CheckpointManifest& r) {
    v1::ShardLayout& layout = *r.add_shard_layouts();
    for (int i = 0; i < 1000; ++i) *layout.add_regions() = r.shard_layouts(0).regions(0);
    for (int t = 0; t < 2000; ++t) {
      v1::TensorEntry& tensor = *r.add_tensors();
      tensor.set_fqn(absl::StrCat("t", t));
      tensor.set_layout(static_cast<uint32_t>(r.shard_layouts_size()));
      tensor.mutable_shard_tables()->Resize(1000, 0);
      tensor.mutable_shard_chunk_counts()->Resize(1000, 0);
      tensor.mutable_shard_writer_ranks()->Resize(1000, 0);
    }
  });
  ManifestLimits many_shards;
  many_shards.max_shards = INT64_MAX;
  refused(many_shards, "--max_manifest_memory_bytes", expanding);
  // A root claiming a billion chunks in a table is refused by its count.
  const std::string huge = Crafted(*files, [](v1::CheckpointManifest& r) {
    r.mutable_chunk_tables(0)->set_chunks(uint64_t{1} << 60);
    r.mutable_chunk_tables(0)->set_bytes(uint64_t{1} << 60);
  });
  int reads = 0;
  CHECK(absl::IsFailedPrecondition(Join(huge, good, {}, &reads).status()));
  CHECK(reads == 0);
}

TEST_CASE("a split is written only where its readers will take it", "[manifest_tables]") {
  const v1::CheckpointManifest m = FullManifest();
  // Under each memory limit: a split SplitManifest makes joins under it;
  // where it would not, there is no split (the commit writes format 1).
  int split = 0, whole = 0;
  for (uint64_t limit = 8 << 10; limit <= 512 << 10; limit += 2 << 10) {
    ManifestLimits limits;
    limits.max_memory_bytes = limit;
    std::optional<SplitManifestFiles> files = SplitManifest(m, limits);
    if (!files.has_value()) {
      ++whole;
      continue;
    }
    ++split;
    absl::StatusOr<v1::CheckpointManifest> joined = Join(files->root, files->tables, limits);
    INFO("limit " << limit << ": " << joined.status());
    REQUIRE(joined.ok());
    CHECK(Same(*joined, m));
  }
  CHECK(split > 0);
  CHECK(whole > 0);
}

TEST_CASE("sizes and counts that would wrap are refused, whatever the limits",
          "[manifest_tables]") {
  const v1::CheckpointManifest m = FullManifest();
  std::optional<SplitManifestFiles> files = SplitManifest(m, {});
  REQUIRE(files.has_value());
  ManifestLimits unlimited;
  unlimited.max_manifest_bytes = UINT64_MAX;
  unlimited.max_memory_bytes = UINT64_MAX;
  unlimited.max_chunks = INT64_MAX;
  const uint64_t big = uint64_t{1} << 63;
  const std::string wrapping_bytes = Crafted(*files, [&](v1::CheckpointManifest& r) {
    r.mutable_chunk_tables(0)->set_bytes(big);
    r.mutable_chunk_tables(1)->set_bytes(big - 1);
  });
  const std::string wrapping_chunks = Crafted(*files, [&](v1::CheckpointManifest& r) {
    r.mutable_chunk_tables(0)->set_chunks(UINT64_MAX);
  });
  for (const std::string& root : {wrapping_bytes, wrapping_chunks}) {
    uint64_t longest = 0;
    const ChunkTablesReader reader = [&](uint64_t, uint64_t length,
                                         uint64_t) -> absl::StatusOr<std::string> {
      longest = std::max(longest, length);
      return absl::DataLossError("not read");
    };
    ManifestFootprint footprint;
    absl::StatusOr<v1::CheckpointManifest> decoded =
        DecodeBoundedManifest(root, "MANIFEST", unlimited, &footprint);
    REQUIRE(decoded.ok());
    const absl::Status s =
        JoinChunkTables(*decoded, footprint, root.size(), "MANIFEST", unlimited, reader);
    INFO(s);
    CHECK_FALSE(s.ok());
    CHECK(longest <= uint64_t{1} << 30);  // never a read of what a wrapped sum allowed
  }
}

}  // namespace
}  // namespace ckpt::planning
