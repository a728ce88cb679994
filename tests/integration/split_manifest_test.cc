// Split manifests end to end (docs/manifest.md): a real ckptd writes a root
// MANIFEST and one chunk table per data file (in TABLES); demo ranks load it under
// another sharding and check every byte; verify, inspect and export read
// it; a daemon writing format 1 still reads it, a root in format 2 (as
// earlier versions wrote it) loads bit-exact; and a damaged table, or
// TABLES missing or of another size, fails the load and verify naming it
// while the daemon serves on.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/planning/compact_root.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "tests/catch.h"
#include "tests/support/file_bytes.h"
#include "tests/support/test_cluster.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

namespace fs = std::filesystem;

// Small chunks: the demo model's shards are many chunks each.
const std::string kChunkFlag = "--chunk_bytes=65536";
const std::string kSplitFlag = "--manifest_split_min_chunks=1";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// The step's MANIFEST as it lies on disk, not joined.
v1::CheckpointManifest RootOnDisk(const TestDaemon& d, const std::string& job, int64_t step) {
  const std::string path = absl::StrCat(d.job_dir(job), "/step-", step, "/MANIFEST");
  absl::StatusOr<v1::CheckpointManifest> m = planning::DecodeManifest(ReadFile(path), path);
  REQUIRE(m.ok());
  return *m;
}

// Every rank failed, each naming `what`.
void RequireAllFailNaming(const std::vector<ExitInfo>& ranks, const std::string& what) {
  for (const ExitInfo& r : ranks) {
    INFO(r.output);
    CHECK_FALSE(r.ok());
    CHECK(absl::StrContains(r.output, what));
  }
}

}  // namespace

TEST_CASE("a split manifest loads resharded bit-exact; verify, inspect and export read it",
          "[integration][split_manifest]") {
  TestDaemon d;
  REQUIRE(d.Start({kChunkFlag, kSplitFlag}).ok());
  RequireAllOk(d.RunRanks("split", "save", 2, 1, 2));

  // On disk: a compact root listing no shard and no tensor chunk (each
  // shard a value in its tensor's columns), and its tables.
  const v1::CheckpointManifest root = RootOnDisk(d, "split", 1);
  CHECK(root.format_version() == planning::kCompactRootFormatVersion);
  CHECK(root.shard_layouts_size() > 0);
  REQUIRE(root.chunk_tables_size() >= 2);  // two ranks, a file each at least
  uint64_t table_chunks = 0;
  uint64_t table_bytes = 0;
  for (const v1::ChunkTableRef& table : root.chunk_tables()) {
    table_bytes += table.bytes();
    table_chunks += table.chunks();
  }
  CHECK(fs::file_size(d.job_dir("split") + "/step-1/TABLES") == table_bytes);
  for (const v1::TensorEntry& t : root.tensors()) {
    CHECK(t.shards_size() == 0);
    CHECK(t.layout() > 0);
  }

  // Loaded by three ranks: every byte checked by the demo ranks.
  RequireAllOk(d.RunRanks("split", "load", 3, 1, 2, 2));
  // Inspect shows the joined manifest: every chunk the tables list.
  const v1::CheckpointManifest joined = InspectManifest(d, "split", 1);
  uint64_t chunks = 0;
  for (const v1::TensorEntry& t : joined.tensors()) {
    for (const v1::StoredShard& s : t.shards()) chunks += s.chunks_size();
  }
  CHECK(chunks == table_chunks);
  ExitInfo verify = d.Ckptctl({"verify", "split", "1"});
  INFO(verify.output);
  CHECK(verify.ok());

  // The same save in format 1 exports the very same safetensors.
  TestDaemon single;
  REQUIRE(single.Start({kChunkFlag}).ok());
  RequireAllOk(single.RunRanks("split", "save", 2, 1, 2));
  CHECK(RootOnDisk(single, "split", 1).format_version() == 1);
  const std::string from_split = d.dir() + "/export-split", from_single = d.dir() + "/export-1";
  ExitInfo exported =
      d.Ckptctl({"export", "split", "1", "--out", from_split, "--storage-root", d.root()});
  INFO(exported.output);
  REQUIRE(exported.ok());
  ExitInfo exported_single = single.Ckptctl(
      {"export", "split", "1", "--out", from_single, "--storage-root", single.root()});
  INFO(exported_single.output);
  REQUIRE(exported_single.ok());
  ExitInfo same = RunCommand({"/usr/bin/diff", "-r", from_split, from_single});
  INFO(same.output);
  CHECK(same.ok());

  // Restarted writing format 1: it reads the split step still, and writes
  // the next one whole.
  d.Kill();
  REQUIRE(d.Start({kChunkFlag, "--manifest_split_min_chunks=0"}).ok());
  RequireAllOk(d.RunRanks("split", "load", 3, 1, 2, 2));
  RequireAllOk(d.RunRanks("split", "save", 2, 2, 2));
  CHECK(RootOnDisk(d, "split", 2).format_version() == 1);
  CHECK_FALSE(fs::exists(d.job_dir("split") + "/step-2/TABLES"));
  RequireAllOk(d.RunRanks("split", "load", 3, 2, 2, 2));
}

TEST_CASE("a split step whose root is format 2 (an earlier version's) loads bit-exact",
          "[integration][split_manifest]") {
  TestDaemon d;
  REQUIRE(d.Start({kChunkFlag, kSplitFlag}).ok());
  RequireAllOk(d.RunRanks("old", "save", 2, 1, 2));
  // The step's root rewritten as an earlier version wrote it: the same
  // tables, each shard a message of the root.
  const std::string dir = d.job_dir("old") + "/step-1";
  const std::string root_bytes = ReadFile(dir + "/MANIFEST");
  const std::string tables = ReadFile(dir + "/TABLES");
  planning::ManifestFootprint footprint;
  absl::StatusOr<v1::CheckpointManifest> m =
      planning::DecodeBoundedManifest(root_bytes, "MANIFEST", {}, &footprint);
  REQUIRE(m.ok());
  REQUIRE(m->format_version() == planning::kCompactRootFormatVersion);
  REQUIRE(planning::JoinChunkTables(
              *m, footprint, root_bytes.size(), "MANIFEST", {},
              [&](uint64_t offset, uint64_t length, uint64_t) -> absl::StatusOr<std::string> {
                return tables.substr(offset, length);
              })
              .ok());
  std::optional<planning::SplitManifestFiles> old =
      planning::SplitManifest(*m, {}, planning::kSplitManifestFormatVersion);
  REQUIRE(old.has_value());
  std::string old_tables;
  for (const std::string& t : old->tables) old_tables += t;
  CHECK(old_tables == tables);  // the tables do not depend on the root's format
  {
    std::ofstream out(dir + "/MANIFEST", std::ios::binary | std::ios::trunc);
    out << old->root;
    REQUIRE(out.good());
  }
  const v1::CheckpointManifest root = RootOnDisk(d, "old", 1);
  REQUIRE(root.format_version() == planning::kSplitManifestFormatVersion);
  REQUIRE(root.tensors_size() > 0);
  CHECK(root.tensors(0).shards_size() > 0);
  // Loaded by three ranks, every byte checked; verify reads it whole.
  RequireAllOk(d.RunRanks("old", "load", 3, 1, 2, 2));
  ExitInfo verify = d.Ckptctl({"verify", "old", "1"});
  INFO(verify.output);
  CHECK(verify.ok());
}

TEST_CASE("a damaged chunk table, or TABLES missing or of another size, fails loads and verify",
          "[integration][split_manifest]") {
  TestDaemon d;
  REQUIRE(d.Start({kChunkFlag, kSplitFlag}).ok());
  for (int64_t step = 1; step <= 3; ++step) RequireAllOk(d.RunRanks("bad", "save", 2, step, 2));
  const std::string step1 = d.job_dir("bad") + "/step-1/";
  const std::string step2 = d.job_dir("bad") + "/step-2/";
  const std::string step3 = d.job_dir("bad") + "/step-3/";

  // A flipped byte inside the second table: its checksum no longer matches.
  const v1::CheckpointManifest root = RootOnDisk(d, "bad", 1);
  REQUIRE(root.chunk_tables_size() >= 2);
  FlipByte(step1 + "TABLES", root.chunk_tables(0).bytes() + root.chunk_tables(1).bytes() / 2);
  RequireAllFailNaming(d.RunRanks("bad", "load", 2, 1, 2, 2), planning::ChunkTableName(2));
  ExitInfo verify = d.Ckptctl({"verify", "bad", "1"});
  INFO(verify.output);
  CHECK_FALSE(verify.ok());
  CHECK(absl::StrContains(verify.output, planning::ChunkTableName(2)));

  // TABLES missing.
  fs::remove(step2 + "TABLES");
  RequireAllFailNaming(d.RunRanks("bad", "load", 2, 2, 2, 2), "TABLES");

  // TABLES of another size than the root lists (a torn or mixed-up copy).
  {
    std::ofstream grow(step3 + "TABLES", std::ios::binary | std::ios::app);
    grow << 'x';
  }
  RequireAllFailNaming(d.RunRanks("bad", "load", 2, 3, 2, 2), "TABLES");

  // The daemon serves on: a new step saves and loads.
  RequireAllOk(d.RunRanks("bad", "save", 2, 4, 2));
  RequireAllOk(d.RunRanks("bad", "load", 3, 4, 2, 2));
  CHECK(d.Running());
}

}  // namespace ckpt::testing
