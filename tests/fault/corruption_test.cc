// Corruption: one flipped byte in a data file. Loading the affected tensor
// and `ckptctl verify` both fail naming the file; unaffected tensors still
// load bit-exact.
#include <fcntl.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <string>

#include "ckpt/client.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/file_bytes.h"
#include "tests/support/test_daemon.h"
#include "tools/demo/model_layout.h"
#include "tools/demo/tensor_pattern.h"

namespace ckpt::testing {
namespace {

// Loads `fqns` (whole tensors) as a single-rank job and checks the bytes.
absl::Status LoadAndCheck(const TestDaemon& d, const std::string& job,
                          const std::vector<std::string>& fqns) {
  ClientOptions options;
  options.socket_path = d.socket();
  options.job = job;
  auto client = Client::Attach(options);
  if (!client.ok()) return client.status();
  std::vector<HostTensor> tensors;
  std::vector<std::vector<char>> buffers;
  for (const HostTensor& t : LoadLayout(0, 1, 2)) {
    if (std::find(fqns.begin(), fqns.end(), t.fqn) == fqns.end()) continue;
    HostTensor whole = t;
    whole.region = Region::Whole();
    buffers.emplace_back(*ShardBytes(whole), 0);
    whole.data = buffers.back().data();
    tensors.push_back(whole);
  }
  absl::StatusOr<int64_t> step = (*client)->Load(kLatestStep, tensors);
  if (!step.ok()) return step.status();
  for (const HostTensor& t : tensors) {
    if (*CountMismatches(t, static_cast<char*>(t.data)) != 0) {
      return absl::DataLossError("loaded bytes differ from the pattern: " + t.fqn);
    }
  }
  return absl::OkStatus();
}

}  // namespace

TEST_CASE("a flipped byte is detected by load and verify, naming the file", "[fault][corruption]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (const ExitInfo& r : d.RunRanks("rot", "save", 4, 5, 2)) {
    INFO(r.output);
    REQUIRE(r.ok());
  }
  // Find the first chunk of the w1 tensor in the manifest.
  grpc::ClientContext context;
  v1::InspectCheckpointRequest request;
  request.set_job("rot");
  request.set_step(5);
  v1::InspectCheckpointResponse response;
  REQUIRE(d.Stub()->InspectCheckpoint(&context, request, &response).ok());
  const v1::StoredChunk* victim = nullptr;
  for (const v1::TensorEntry& t : response.manifest().tensors()) {
    if (t.fqn() == "model.layers.0.mlp.w1.weight") victim = &t.shards(0).chunks(0);
  }
  REQUIRE(victim != nullptr);
  const std::string file = d.job_dir("rot") + "/step-5/" + victim->file();
  FlipByte(file, victim->file_offset() + 100);

  const absl::Status bad = LoadAndCheck(d, "rot", {"model.layers.0.mlp.w1.weight"});
  INFO(bad.ToString());
  CHECK(absl::IsDataLoss(bad));
  CHECK(bad.message().find(victim->file()) != absl::string_view::npos);
  CHECK(bad.message().find("model.layers.0.mlp.w1.weight") != absl::string_view::npos);
  CHECK(bad.message().find("checksum mismatch") != absl::string_view::npos);

  const ExitInfo verify = d.Ckptctl({"verify", "rot", "5"});
  INFO(verify.output);
  CHECK(verify.exit_code == 1);
  CHECK(verify.output.find(victim->file()) != std::string::npos);
  CHECK(verify.output.find(std::to_string(victim->file_offset())) != std::string::npos);

  // Tensors stored in other chunks are still served, bit-exact.
  const absl::Status good = LoadAndCheck(
      d, "rot", {"model.layers.0.attn.qkv.weight", "model.embed.weight", "model.quant.codes"});
  INFO(good.ToString());
  CHECK(good.ok());
}

}  // namespace ckpt::testing
