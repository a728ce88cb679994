// Split manifests for tests (manifest_tables.h): a manifest with every
// field the format has, TABLES as a reader, and roots and tables crafted
// with valid trailers (hostile files that pass the first checks).
#ifndef CKPT_TESTS_UNIT_DAEMON_PLANNING_SPLIT_HELPERS_H_
#define CKPT_TESTS_UNIT_DAEMON_PLANNING_SPLIT_HELPERS_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/save_planner.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning::testing {

// A planned manifest of two hosts, two writer files each, with every
// field the format has set somewhere: encoded chunks, deltas, objects,
// metadata, an empty tensor.
inline v1::CheckpointManifest FullManifest() {
  std::vector<v1::NodeSavePlan> nodes = {Node("h0", 4, 2, {0, 1}), Node("h1", 4, 2, {2, 3})};
  for (int t = 0; t < 6; ++t) {
    const std::string fqn = absl::StrCat("layers.", t, ".w");
    for (int r = 0; r < 4; ++r) {
      AddShard(nodes[r / 2], r, BoxShard(fqn, v1::FLOAT32, {64, 300}, {r * 16, 0}, {16, 300}));
    }
  }
  AddShard(nodes[0], 0, BoxShard("empty", v1::FLOAT32, {0, 4}, {0, 0}, {0, 4}));
  *nodes[0].mutable_ranks(0)->add_objects() = testing::Object("rng", false, 100);
  nodes[0].mutable_user_metadata()->insert({std::string("k"), std::string("v")});
  SavePlannerOptions options;
  options.chunk_bytes = 4096;  // a shard of 19,200 bytes is 5 chunks
  absl::StatusOr<v1::SaveAssignment> plan = PlanSave(nodes, options);
  REQUIRE(plan.ok());
  v1::CheckpointManifest m = planning::ManifestOf(*plan);
  m.set_created_unix_ms(1700000000000);
  m.set_delta_base_step(3);
  m.set_delta_ordinal(2);
  m.mutable_topology()->add_hosts()->set_host("h0");
  m.mutable_tensors(0)->set_partial(true);
  uint32_t n = 1;
  (void)ForEachMutableChunk(m, [&](v1::StoredChunk& c, const std::string&) {
    c.set_crc32c(0x9e3779b9u * n++);
    if (n % 3 != 0 || c.length() <= 8) return absl::OkStatus();
    c.set_codec(v1::CHUNK_CODEC_GROUPED_ZSTD);
    c.set_stored_length(c.length() / 2);
    c.set_stored_crc32c(n);
    c.set_element_bytes(4);
    if (n % 2 == 0) {  // a delta is stored encoded
      c.set_delta_base_step(3);
      c.mutable_delta_base()->set_file("data/h0-0.bin");
      c.mutable_delta_base()->set_length(c.length());
      c.mutable_delta_base()->set_crc32c(n);
    }
    return absl::OkStatus();
  });
  return m;
}

// The tables as TABLES holds them, back to back; none: no TABLES.
using Tables = std::vector<std::string>;

inline ChunkTablesReader ReaderOf(const Tables& tables, int* reads = nullptr) {
  std::string file;
  for (const std::string& t : tables) file += t;
  return [file, missing = tables.empty(), reads](uint64_t offset, uint64_t length,
                                                 uint64_t total) -> absl::StatusOr<std::string> {
    if (reads != nullptr) ++*reads;
    if (missing) return absl::NotFoundError("TABLES is missing");
    if (file.size() != total) return absl::DataLossError("TABLES: size");
    if (offset > total || length > total - offset) return absl::OutOfRangeError("past TABLES");
    return file.substr(offset, length);
  };
}

// A root rewritten by `edit`, then encoded again (a crafted MANIFEST with
// a valid trailer).
template <typename Edit>
std::string Crafted(const SplitManifestFiles& files, const Edit& edit) {
  absl::StatusOr<v1::CheckpointManifest> root = DecodeManifest(files.root, "MANIFEST");
  REQUIRE(root.ok());
  edit(*root);
  return EncodeManifest(*root);
}

// A table rewritten by `edit`, its root entry fixed to match (a crafted
// table that passes its own checks).
template <typename Edit>
std::string CraftedTable(SplitManifestFiles& files, Tables& tables, uint32_t index,
                         const Edit& edit) {
  std::string& bytes = tables[index - 1];
  absl::StatusOr<v1::ChunkTable> table = DecodeChunkTable(bytes, ChunkTableName(index), {});
  REQUIRE(table.ok());
  edit(*table);
  bytes = WithCrcTrailer(table->SerializeAsString());
  return Crafted(files, [&](v1::CheckpointManifest& root) {
    v1::ChunkTableRef* ref = root.mutable_chunk_tables(static_cast<int>(index - 1));
    ref->set_bytes(bytes.size());
    ref->set_crc32c(TrailerCrc(bytes));
    ref->set_chunks(static_cast<uint64_t>(table->shard_size()));
  });
}

}  // namespace ckpt::planning::testing

#endif  // CKPT_TESTS_UNIT_DAEMON_PLANNING_SPLIT_HELPERS_H_
