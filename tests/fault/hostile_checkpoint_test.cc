// Checkpoints on disk are untrusted input, end to end against a real ckptd:
// a rollback is latest (also after a restart), a broken latest fails closed
// naming the step to use instead while `ckptctl list` still works, and a
// MANIFEST with a valid trailer but hostile contents (traversal, a FIFO as
// data file, a compact root that would expand past the memory limit) is
// refused by load and verify without hanging the daemon, which then still
// saves and loads.
#include <sys/stat.h>

#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ckpt/v1/node.grpc.pb.h"
#include "daemon/planning/manifest_io.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

ExitInfo LoadOne(const TestDaemon& d, const std::string& job, int64_t step) {
  return d.RunRanks(job, "load", 1, step, 1, 1).at(0);
}

// Rewrites a step's MANIFEST with a valid CRC trailer: only the contents lie.
void PlantManifest(const TestDaemon& d, const std::string& job, int64_t step,
                   const v1::CheckpointManifest& manifest) {
  std::ofstream(d.job_dir(job) + "/step-" + std::to_string(step) + "/MANIFEST",
                std::ios::binary | std::ios::trunc)
      << planning::EncodeManifest(manifest);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Verify and a load of job evil's step 1 both fail, saying `says`.
void RequireVerifyAndLoadRefuse(const TestDaemon& d, const std::string& says) {
  const ExitInfo verify = d.Ckptctl({"verify", "evil", "1"});
  INFO(verify.output);
  CHECK(verify.exit_code == 1);
  CHECK(verify.output.find(says) != std::string::npos);
  const ExitInfo load = LoadOne(d, "evil", 1);
  INFO(load.output);
  CHECK_FALSE(load.ok());
  CHECK(load.output.find(says) != std::string::npos);
}

}  // namespace

TEST_CASE("a rollback is latest, also after a restart", "[fault][latest]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  SaveStep(d, "roll", 100);
  SaveStep(d, "roll", 200);
  // Resumed from 100, the job saves 150 while 200 exists.
  SaveStep(d, "roll", 150);
  ExitInfo load = LoadOne(d, "roll", -1);
  INFO(load.output);
  CHECK(load.output.find("loaded step 150") != std::string::npos);
  d.Kill();
  REQUIRE(d.Start().ok());
  load = LoadOne(d, "roll", -1);
  INFO(load.output);
  CHECK(load.output.find("loaded step 150") != std::string::npos);
  const ExitInfo list = d.Ckptctl({"list", "roll"});
  INFO(list.output);
  CHECK(list.ok());
  std::istringstream lines(list.output);
  std::string line, latest_row;
  while (std::getline(lines, line)) {
    if (line.find("latest") != std::string::npos) latest_row = line;
  }
  CHECK(latest_row.find("150") != std::string::npos);

  // An old root without LATEST: the highest step that validates, logged.
  d.Kill();
  std::filesystem::remove(d.job_dir("roll") + "/LATEST");
  REQUIRE(d.Start().ok());
  load = LoadOne(d, "roll", -1);
  INFO(load.output);
  CHECK(load.output.find("loaded step 200") != std::string::npos);
  CHECK(d.Output().find("LATEST is missing; latest is step 200") != std::string::npos);
}

TEST_CASE("a broken latest fails closed and the list still works", "[fault][latest]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  SaveStep(d, "brk", 1);
  SaveStep(d, "brk", 2);
  std::string manifest = ReadText(d.job_dir("brk") + "/step-2/MANIFEST");
  manifest[manifest.size() / 2] ^= 0x08;
  std::ofstream(d.job_dir("brk") + "/step-2/MANIFEST", std::ios::binary | std::ios::trunc)
      << manifest;

  const ExitInfo load = LoadOne(d, "brk", -1);
  INFO(load.output);
  CHECK_FALSE(load.ok());
  CHECK(load.output.find("step 2, which is broken") != std::string::npos);
  CHECK(load.output.find("the newest older step that verifies is 1") != std::string::npos);

  const ExitInfo list = d.Ckptctl({"list", "brk"});
  INFO(list.output);
  CHECK(list.ok());
  CHECK(list.output.find("BROKEN") != std::string::npos);
  CHECK(list.output.find("checksum mismatch") != std::string::npos);
  const ExitInfo verify = d.Ckptctl({"verify", "brk", "latest"});
  CHECK(verify.exit_code == 1);
  CHECK(d.Ckptctl({"verify", "brk", "1"}).ok());
  const ExitInfo older = LoadOne(d, "brk", 1);
  INFO(older.output);
  CHECK(older.ok());
}

TEST_CASE("hostile manifests are refused and the daemon keeps serving", "[fault][hostile]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  SaveStep(d, "victim", 1);
  SaveStep(d, "evil", 1);
  v1::CheckpointManifest m = InspectManifest(d, "evil", 1);
  REQUIRE(m.tensors_size() > 0);
  const std::string data_file = m.tensors(0).shards(0).chunks(0).file();

  SECTION("traversal to another job's data") {
    for (v1::TensorEntry& t : *m.mutable_tensors()) {
      for (v1::StoredShard& s : *t.mutable_shards()) {
        for (v1::StoredChunk& c : *s.mutable_chunks()) {
          c.set_file("../../victim/step-1/" + c.file());
        }
      }
    }
    PlantManifest(d, "evil", 1, m);
    RequireVerifyAndLoadRefuse(d, "leaves its directory");
  }
  SECTION("a shard without chunks") {
    m.mutable_tensors(0)->mutable_shards(0)->clear_chunks();
    PlantManifest(d, "evil", 1, m);
    const ExitInfo load = LoadOne(d, "evil", 1);
    INFO(load.output);
    CHECK_FALSE(load.ok());
    CHECK(load.output.find("lists no chunks") != std::string::npos);
  }
  SECTION("a FIFO as data file") {
    const std::string path = d.job_dir("evil") + "/step-1/" + data_file;
    std::filesystem::remove(path);
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    const ExitInfo verify = d.Ckptctl({"--timeout=20", "verify", "evil", "1"});
    INFO(verify.output);
    CHECK(verify.exit_code == 1);
    CHECK(verify.output.find("FIFO") != std::string::npos);
    const ExitInfo load = LoadOne(d, "evil", 1);
    INFO(load.output);
    CHECK_FALSE(load.ok());
  }
  SECTION("a compact root that would expand past the memory limit") {
    // A split manifest's root (format 3) of 4,000 tensors naming one
    // layout of 1,000 regions, each shard claiming 4 chunks: 4 million
    // shards and 16 million chunks in 12 MB, some 1 GB expanded and
    // joined (verify), and 0.8 GB even as a load's columns
    // (column_manifest_read.h): past the default
    // --max_manifest_memory_bytes either way. It is refused before a shard
    // is made or a table read.
    v1::CheckpointManifest root;
    root.set_format_version(3);
    root.set_job("evil");
    root.set_step(1);
    v1::ShardLayout& layout = *root.add_shard_layouts();
    for (int i = 0; i < 1000; ++i) {
      v1::Box& box = *layout.add_regions()->mutable_box();
      box.add_offsets(i);
      box.add_lengths(1);
    }
    for (int t = 0; t < 4000; ++t) {
      v1::TensorEntry& tensor = *root.add_tensors();
      tensor.set_fqn("t" + std::to_string(t));
      tensor.set_dtype(v1::FLOAT32);
      tensor.add_global_shape(1000);
      tensor.set_layout(1);
      tensor.mutable_shard_tables()->Resize(1000, 1);
      tensor.mutable_shard_chunk_counts()->Resize(1000, 4);
      tensor.mutable_shard_writer_ranks()->Resize(1000, 0);
    }
    v1::ChunkTableRef& table = *root.add_chunk_tables();
    table.set_file(data_file);
    table.set_bytes(64);
    table.set_chunks(16000000);
    PlantManifest(d, "evil", 1, root);
    RequireVerifyAndLoadRefuse(d, "--max_manifest_memory_bytes");
  }
  SECTION("a manifest copied from another job") {
    const std::string victim = ReadText(d.job_dir("victim") + "/step-1/MANIFEST");
    std::ofstream(d.job_dir("evil") + "/step-1/MANIFEST", std::ios::binary | std::ios::trunc)
        << victim;
    const ExitInfo verify = d.Ckptctl({"verify", "evil", "1"});
    INFO(verify.output);
    CHECK(verify.exit_code == 1);
    CHECK(verify.output.find("not of job evil step 1") != std::string::npos);
  }
  // The daemon is alive and still saves and loads bit-exact.
  CHECK(d.Ckptctl({"status"}).ok());
  SaveStep(d, "after", 1);
  const ExitInfo load = LoadOne(d, "after", -1);
  INFO(load.output);
  CHECK(load.ok());
  CHECK(d.Ckptctl({"verify", "victim", "1"}).ok());
}

}  // namespace ckpt::testing
