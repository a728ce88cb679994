// Per-job quotas: saves in flight, and bytes on disk. Each refusal names the
// quota and its flag, and leaves nothing behind.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "tests/catch.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

// A checkpoint of kOne bytes: one float32 tensor of 64 x 1024, its bytes
// different per seed.
constexpr uint64_t kOne = 64 * 4096;
std::vector<RawTensor> Model(uint32_t seed) {
  std::vector<RawTensor> tensors(1);
  tensors[0].shard = Whole("w", v1::FLOAT32, {64, 1024});
  tensors[0].bytes.resize(kOne);
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : tensors[0].bytes) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x);
  }
  return tensors;
}

std::string QuotaFlag(uint64_t bytes) { return "--job_max_disk_bytes=" + std::to_string(bytes); }

// The bytes of the job's steps on storage, as the daemon lists them.
uint64_t DurableBytes(const TestDaemon& d, const std::string& job) {
  grpc::ClientContext context;
  v1::ListCheckpointsRequest request;
  request.set_job(job);
  v1::ListCheckpointsResponse response;
  const grpc::Status status = d.Stub()->ListCheckpoints(&context, request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  uint64_t bytes = 0;
  for (const v1::CheckpointSummary& c : response.checkpoints()) {
    for (const std::string& tier : c.tiers()) bytes += tier == "durable" ? c.bytes() : 0;
  }
  return bytes;
}

// A planned save's copies and commit.
grpc::Status FinishSave(NodeStub& stub, RawRank& rank, const v1::PlanSaveResponse& planned,
                        const std::vector<RawTensor>& model) {
  for (;;) {
    v1::SaveBatch batch;
    if (grpc::Status s = rank.NextBatch(planned.save_id(), &batch); !s.ok()) return s;
    if (grpc::Status s = rank.Fill(batch, model, {}); !s.ok()) return s;
    if (grpc::Status s = rank.Submit(planned.save_id(), batch.batch_id()); !s.ok()) return s;
    if (batch.last()) break;
  }
  return WaitSaveRaw(stub, rank.session(), planned.save_id());
}

void CheckQuotaRefusal(const grpc::Status& status, const std::string& job) {
  CheckError(status, grpc::StatusCode::RESOURCE_EXHAUSTED, "--job_max_disk_bytes");
  CHECK(absl::StrContains(status.error_message(), "job " + job + " holds"));
  CHECK(absl::StrContains(status.error_message(), "reserved by its saves in flight"));
}

TEST_CASE("a job may have --job_max_saves_in_flight saves at once; the next step is refused",
          "[quota]") {
  TestDaemon d;
  // Rank 1 never attaches: the grace for it outlasts the test.
  REQUIRE(d.Start({"--job_max_saves_in_flight=1", "--rank_grace_s=600"}).ok());
  // Rank 0 of 2 plans step 1 and waits for rank 1 at the barrier: in flight.
  std::unique_ptr<Subprocess> waiting = d.StartRank("q", "save", 0, 2, 1);
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 1; }));
  // Another step of the same job is over the quota...
  const std::vector<ExitInfo> refused = d.RunRanks("q", "save", 1, 2, 1);
  INFO(refused[0].output);
  CHECK_FALSE(refused[0].ok());
  CHECK(absl::StrContains(refused[0].output, "RESOURCE_EXHAUSTED"));
  CHECK(absl::StrContains(refused[0].output, "--job_max_saves_in_flight"));
  // ...another job is not.
  CHECK(d.RunRanks("other", "save", 1, 1, 1)[0].ok());
  waiting.reset();  // killed: its save fails and leaves the quota
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 0; }));
  CHECK(d.RunRanks("q", "save", 1, 3, 1)[0].ok());
}

TEST_CASE("--job_max_disk_bytes refuses a save that would take a job past it", "[quota]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  REQUIRE(d.RunRanks("q", "save", 1, 1, 1)[0].ok());
  const uint64_t one = d.Status().storage_bytes_written();
  REQUIRE(one > 0);
  d.Kill();
  // Room for one checkpoint and a half: the second does not fit.
  REQUIRE(d.Start({"--job_max_disk_bytes=" + std::to_string(one + one / 2)}).ok());
  const std::vector<ExitInfo> refused = d.RunRanks("q", "save", 1, 2, 1);
  INFO(refused[0].output);
  CHECK_FALSE(refused[0].ok());
  CHECK(absl::StrContains(refused[0].output, "RESOURCE_EXHAUSTED"));
  CHECK(absl::StrContains(refused[0].output, "--job_max_disk_bytes"));
  // Nothing of step 2 is left, and step 1 still loads.
  CHECK(ListDir(d.job_dir("q")) == std::vector<std::string>{"LATEST", "OWNER", "step-1"});
  CHECK(d.RunRanks("q", "load", 1, 1, 1)[0].ok());
  // The quota is per job: another job saves.
  CHECK(d.RunRanks("fresh", "save", 1, 1, 1)[0].ok());
}

TEST_CASE("saves of one job planned at once count each other against --job_max_disk_bytes",
          "[quota]") {
  TestDaemon d;
  const uint64_t quota = kOne + kOne / 2;  // room for one checkpoint, not two
  REQUIRE(d.Start({QuotaFlag(quota)}).ok());
  auto stub = d.Stub();
  const std::vector<RawTensor> model = Model(1);
  // Four saves are planned before any of them writes a byte: the first
  // reserves its bytes, and each one after it must count them.
  std::vector<std::unique_ptr<RawRank>> ranks;
  std::vector<v1::PlanSaveResponse> planned(4);
  std::vector<grpc::Status> plans;
  for (int i = 0; i < 4; ++i) {
    ranks.push_back(std::make_unique<RawRank>(*stub, "race", 0, 1));
    plans.push_back(ranks[i]->PlanSave(i + 1, model, {}, &planned[i]));
  }
  INFO(plans[0].error_message());
  REQUIRE(plans[0].ok());
  for (int i = 1; i < 4; ++i) CheckQuotaRefusal(plans[i], "race");
  const grpc::Status committed = FinishSave(*stub, *ranks[0], planned[0], model);
  INFO(committed.error_message());
  REQUIRE(committed.ok());
  CHECK(ListedSteps(d, "race") == std::vector<int64_t>{1});
  CHECK(DurableBytes(d, "race") == kOne);
  // Committed, its bytes still count.
  CheckQuotaRefusal(ranks[1]->Save(5, model, {}), "race");
  CHECK(DurableBytes(d, "race") <= quota);
}

TEST_CASE("racing saves never take a job past --job_max_disk_bytes, whatever the interleaving",
          "[quota]") {
  TestDaemon d;
  const uint64_t quota = kOne + kOne / 2;
  REQUIRE(d.Start({QuotaFlag(quota)}).ok());
  auto stub = d.Stub();
  const std::vector<RawTensor> model = Model(2);
  constexpr int kSavers = 4;
  for (int round = 0; round < 5; ++round) {
    const std::string job = "race" + std::to_string(round);
    std::vector<std::unique_ptr<RawRank>> ranks;
    for (int i = 0; i < kSavers; ++i) ranks.push_back(std::make_unique<RawRank>(*stub, job, 0, 1));
    std::vector<grpc::Status> results(kSavers);
    std::vector<std::thread> savers;
    for (int i = 0; i < kSavers; ++i) {
      savers.emplace_back([&, i] { results[i] = ranks[i]->Save(i + 1, model, {}); });
    }
    for (std::thread& t : savers) t.join();
    int committed = 0;
    for (const grpc::Status& s : results) {
      if (s.ok()) {
        ++committed;
      } else {
        CheckQuotaRefusal(s, job);
      }
    }
    // The first admitted always fits; every other one finds it reserved or
    // committed.
    CHECK(committed == 1);
    CHECK(DurableBytes(d, job) == kOne);
    CHECK(DurableBytes(d, job) <= quota);
  }
}

TEST_CASE("memory+durable saves are held to --job_max_disk_bytes as they are planned",
          "[quota][memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  REQUIRE(d.RunRanks("both", "save", 1, 1, 1)[0].ok());
  const uint64_t one = DurableBytes(d, "both");
  REQUIRE(one > 0);
  d.Kill();
  // Room for step 1 and one more, not two.
  const uint64_t quota = 2 * one + one / 2;
  REQUIRE(d.Start({QuotaFlag(quota), "--memory_tier_bytes=" + std::to_string(64 << 20)}).ok());
  const std::vector<std::string> both = {"--tier=both"};
  const ExitInfo second = d.RunRanks("both", "save", 1, 2, 1, 0, both)[0];
  INFO(second.output);
  REQUIRE(second.ok());
  // Step 2 may still be persisting: its bytes are reserved until it is on
  // storage, and counted there after.
  const ExitInfo third = d.RunRanks("both", "save", 1, 3, 1, 0, both)[0];
  INFO(third.output);
  CHECK_FALSE(third.ok());
  CHECK(absl::StrContains(third.output, "RESOURCE_EXHAUSTED"));
  CHECK(absl::StrContains(third.output, "--job_max_disk_bytes"));
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_persists() == 1; }));
  CHECK(DurableBytes(d, "both") == 2 * one);
  CHECK(DurableBytes(d, "both") <= quota);
  // A save to memory alone takes no disk.
  CHECK(d.RunRanks("both", "save", 1, 4, 1, 0, {"--tier=memory"})[0].ok());
  // The steps saved load back, bit-exact (the demo rank checks every byte).
  CHECK(d.RunRanks("both", "load", 1, 2, 1, 1, {"--from=durable"})[0].ok());
}

TEST_CASE("a cancelled or abandoned save gives back the disk it reserved", "[quota][cancel]") {
  TestDaemon d;
  REQUIRE(d.Start({QuotaFlag(kOne + kOne / 2)}).ok());
  auto stub = d.Stub();
  const std::vector<RawTensor> model = Model(3);
  SECTION("cancelled by the operator") {
    RawRank held(*stub, "give", 0, 1);
    v1::PlanSaveResponse planned;
    REQUIRE(held.PlanSave(1, model, {}, &planned).ok());
    RawRank other(*stub, "give", 0, 1);
    CheckQuotaRefusal(other.Save(2, model, {}), "give");
    const ExitInfo cancel = d.Ckptctl({"cancel", "give", "1"});
    INFO(cancel.output);
    REQUIRE(cancel.ok());
    REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 0; }));
    const grpc::Status saved = other.Save(2, model, {});
    INFO(saved.error_message());
    CHECK(saved.ok());
  }
  SECTION("its rank went away") {
    auto held = std::make_unique<RawRank>(*stub, "give", 0, 1);
    v1::PlanSaveResponse planned;
    REQUIRE(held->PlanSave(1, model, {}, &planned).ok());
    RawRank other(*stub, "give", 0, 1);
    CheckQuotaRefusal(other.Save(2, model, {}), "give");
    held.reset();  // detaches: the save fails
    REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 0; }));
    const grpc::Status saved = other.Save(2, model, {});
    INFO(saved.error_message());
    CHECK(saved.ok());
  }
  CHECK(ListedSteps(d, "give") == std::vector<int64_t>{2});
  CHECK(DurableBytes(d, "give") == kOne);
}

}  // namespace
}  // namespace ckpt::testing
