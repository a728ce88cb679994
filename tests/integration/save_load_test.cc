// End to end on one host: real ckptd, N rank processes save, a different
// number M of rank processes load under another sharding, every byte
// checked against the generating pattern (inside ckpt-demo-rank).
#include <grpcpp/grpcpp.h>

#include <map>
#include <string>

#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"
#include "tools/demo/model_layout.h"
#include "tools/demo/tensor_pattern.h"

namespace ckpt::testing {
namespace {

void RequireAllOk(const std::vector<ExitInfo>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    INFO("rank " << r << " output:\n" << ranks[r].output);
    REQUIRE(ranks[r].ok());
  }
}

v1::CheckpointManifest Inspect(TestDaemon& d, const std::string& job, int64_t step) {
  grpc::ClientContext context;
  v1::InspectCheckpointRequest request;
  request.set_job(job);
  request.set_step(step);
  v1::InspectCheckpointResponse response;
  grpc::Status s = d.Stub()->InspectCheckpoint(&context, request, &response);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return response.manifest();
}

v1::GetStatusResponse Status(TestDaemon& d) {
  grpc::ClientContext context;
  v1::GetStatusResponse response;
  REQUIRE(d.Stub()->GetStatus(&context, v1::GetStatusRequest(), &response).ok());
  return response;
}

}  // namespace

TEST_CASE("4 ranks save, 3 ranks load with another sharding, bit-exact", "[integration]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  constexpr int kSaveWorld = 4;
  constexpr int kLoadWorld = 3;
  constexpr int kScale = 4;
  RequireAllOk(d.RunRanks("llm", "save", kSaveWorld, 100, kScale));

  const v1::CheckpointManifest manifest = Inspect(d, "llm", 100);
  std::map<std::string, const v1::TensorEntry*> tensors;
  for (const v1::TensorEntry& t : manifest.tensors()) tensors[t.fqn()] = &t;
  REQUIRE(tensors.size() == 6);

  SECTION("replicas are written once, distinct shards each once") {
    CHECK(tensors["model.embed.weight"]->shards_size() == 1);         // DP replicas x4
    CHECK(tensors["model.layers.0.norm.state"]->shards_size() == 2);  // TP=2 halves x2
    CHECK(tensors["model.layers.0.attn.qkv.weight"]->shards_size() == kSaveWorld);
    CHECK(tensors["model.layers.0.mlp.w1.weight"]->shards_size() == kSaveWorld);
    CHECK(tensors["optimizer.loss_scale"]->shards_size() == 1);
    // Stored bytes equal the unique bytes: nothing written twice.
    uint64_t stored = 0;
    for (const v1::TensorEntry& t : manifest.tensors()) {
      for (const v1::StoredShard& s : t.shards()) {
        for (const v1::StoredChunk& c : s.chunks()) stored += c.length();
      }
    }
    // Each tensor's full size, once (the demo model's shapes).
    const uint64_t unique = 256 * kScale * 1024 * 4 + 128 * kScale * 512 * 2 +
                            300 * kScale * 257 * 2 + 7 * 3 * 5 * 8 + 8 + 100003 * kScale;
    CHECK(stored == unique);
    int global = 0, per_rank = 0;
    for (const v1::ObjectEntry& o : manifest.objects()) (o.rank() == -1 ? global : per_rank)++;
    CHECK(global == 1);
    CHECK(per_rank == kSaveWorld);
  }

  SECTION("load reshards, and reads each stored chunk once per host") {
    uint64_t stored_aligned = 0;
    for (const v1::TensorEntry& t : manifest.tensors()) {
      for (const v1::StoredShard& s : t.shards()) {
        for (const v1::StoredChunk& c : s.chunks())
          stored_aligned += (c.length() + 4095) / 4096 * 4096;
      }
    }
    for (const v1::ObjectEntry& o : manifest.objects()) {
      stored_aligned += (o.chunk().length() + 4095) / 4096 * 4096;
    }
    const uint64_t read_before = Status(d).storage_bytes_read();
    RequireAllOk(d.RunRanks("llm", "load", kLoadWorld, -1, kScale, kSaveWorld));
    const uint64_t read = Status(d).storage_bytes_read() - read_before;
    // Every rank wants norm.state, loss_scale and the dataloader object, and
    // neighbouring column boxes share stored rows: reading per rank would
    // exceed the stored size. Reading once per host cannot.
    CHECK(read <= stored_aligned);
    CHECK(read >=
          stored_aligned - 4096 * static_cast<uint64_t>(kSaveWorld));  // unneeded rng objects
  }

  SECTION("ckptctl sees, inspects and verifies the checkpoint") {
    ExitInfo list = d.Ckptctl({"list", "llm"});
    INFO(list.output);
    CHECK(list.ok());
    CHECK(list.output.find("100") != std::string::npos);
    ExitInfo inspect = d.Ckptctl({"inspect", "llm", "100"});
    CHECK(inspect.ok());
    CHECK(inspect.output.find("model.embed.weight") != std::string::npos);
    ExitInfo verify = d.Ckptctl({"verify", "llm", "latest"});
    INFO(verify.output);
    CHECK(verify.ok());
    ExitInfo status = d.Ckptctl({"status"});
    CHECK(status.ok());
  }
}

// ckptctl status shows what the job's checkpoints cost, from ckptd's own
// clocks, and with an MTBF the interval that pays (Young/Daly).
TEST_CASE("ckptctl status shows each job's checkpoint cost and the interval that pays",
          "[integration]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  RequireAllOk(d.RunRanks("costly", "save", 2, 1, 1));
  RequireAllOk(d.RunRanks("costly", "save", 2, 2, 1));
  ExitInfo plain = d.Ckptctl({"status"});
  INFO(plain.output);
  REQUIRE(plain.ok());
  CHECK(plain.output.find("job costly: 2 saves, snapshot ") != std::string::npos);
  CHECK(plain.output.find("Young/Daly") == std::string::npos);  // no MTBF given
  ExitInfo with_mtbf = d.Ckptctl({"status", "--mtbf_h", "4"});
  INFO(with_mtbf.output);
  REQUIRE(with_mtbf.ok());
  CHECK(with_mtbf.output.find("Young/Daly at MTBF 4.0 h: every ") != std::string::npos);
  CHECK(with_mtbf.output.find("at the current interval") != std::string::npos);
  ExitInfo json = d.Ckptctl({"status", "--json"});
  REQUIRE(json.ok());
  CHECK(json.output.find("\"job_costs\"") != std::string::npos);
  CHECK(json.output.find("\"saves\": \"2\"") != std::string::npos);
  CHECK_FALSE(d.Ckptctl({"status", "--mtbf_h", "-1"}).ok());
}

TEST_CASE("latest is the newest committed step; older steps stay loadable", "[integration]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  RequireAllOk(d.RunRanks("job", "save", 2, 1, 1));
  RequireAllOk(d.RunRanks("job", "save", 2, 2, 1));
  CHECK(Inspect(d, "job", -1).step() == 2);
  RequireAllOk(d.RunRanks("job", "load", 5, 1, 1, 2));
  RequireAllOk(d.RunRanks("job", "load", 1, -1, 1, 2));
  // Restart: committed checkpoints are found again.
  d.Kill();
  REQUIRE(d.Start().ok());
  CHECK(Inspect(d, "job", -1).step() == 2);
  RequireAllOk(d.RunRanks("job", "load", 3, 2, 1, 2));
}

}  // namespace ckpt::testing
