// A save or load waiting for a rank that has no session here (it never
// attached, or its process died before the barrier) fails within
// --rank_grace_s, naming the rank, not at --plan_timeout_s. The daemons
// here wait 120 s for a plan and 2 s for a rank: each call's own deadline
// (30 s, or 60 s for a rank process) fails the test if only the plan
// timeout ends the wait.
#include <signal.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "tests/catch.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

const std::vector<std::string> kFlags = {"--rank_grace_s=2", "--plan_timeout_s=120"};
constexpr absl::Duration kRankDeadline = absl::Seconds(60);

std::vector<RawTensor> Model() {
  std::vector<RawTensor> tensors(1);
  tensors[0].shard = Whole("w", v1::FLOAT32, {16, 1024});
  tensors[0].bytes.assign(16 * 4096, '\x5a');
  return tensors;
}

std::string Absent(int rank, const std::string& job) {
  return "rank " + std::to_string(rank) + " of job " + job +
         " has no session here (never attached or gone)";
}

// Runs one demo rank to its end, or fails the test if it is still waiting
// after kRankDeadline.
ExitInfo RunRank(const TestDaemon& d, const std::string& job, const std::string& mode, int rank,
                 int world, int64_t step, int saved_world = 1) {
  std::unique_ptr<Subprocess> process = d.StartRank(job, mode, rank, world, step, saved_world);
  std::optional<ExitInfo> exit = process->WaitFor(kRankDeadline);
  REQUIRE(exit.has_value());
  return *exit;
}

// The job's directory holds no step and no partial save.
void CheckNoSteps(const TestDaemon& d, const std::string& job) {
  for (const std::string& name : ListDir(d.job_dir(job))) {
    INFO(name);
    CHECK_FALSE(absl::StartsWith(name, "step-"));
    CHECK_FALSE(absl::StrContains(name, "partial"));
  }
}

// Rank 1 of a world of 2 attaches, then is SIGKILLed and reaped.
void KillRankOne(const TestDaemon& d, const std::string& job) {
  std::unique_ptr<Subprocess> doomed = d.StartRank(job, "attach", 1, 2, 1);
  REQUIRE(doomed->WaitForOutput("attached", absl::Seconds(30)));
  doomed->Signal(SIGKILL);
  doomed->Wait();
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.attached_ranks() == 0; }));
}

}  // namespace

TEST_CASE("a save waiting for a rank that never attached fails naming it", "[rank_grace]") {
  TestDaemon d;
  REQUIRE(d.Start(kFlags).ok());
  auto stub = d.Stub();
  {
    RawRank lonely(*stub, "lonely", 0, 2);
    v1::PlanSaveResponse planned;
    CheckError(lonely.PlanSave(1, Model(), {}, &planned), grpc::StatusCode::ABORTED,
               Absent(1, "lonely"));
  }
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 0; }));
  CheckNoSteps(d, "lonely");
  // Both ranks present: the save and its load go through, bit-exact.
  for (const ExitInfo& e : d.RunRanks("lonely", "save", 2, 2, 1)) {
    INFO(e.output);
    CHECK(e.ok());
  }
  for (const ExitInfo& e : d.RunRanks("lonely", "load", 2, 2, 1, 2)) {
    INFO(e.output);
    CHECK(e.ok());
  }
}

TEST_CASE("a load waiting for a rank that never attached fails naming it", "[rank_grace]") {
  TestDaemon d;
  REQUIRE(d.Start(kFlags).ok());
  auto stub = d.Stub();
  {
    RawRank saver(*stub, "lonelyload", 0, 1);
    REQUIRE(saver.Save(1, Model(), {}).ok());
  }
  {
    RawRank lonely(*stub, "lonelyload", 0, 2);
    std::vector<RawTensor> tensors = Model();
    std::map<std::string, std::string> objects;
    CheckError(lonely.Load(1, tensors, objects), grpc::StatusCode::ABORTED,
               Absent(1, "lonelyload"));
  }
  // Two ranks that both ask load it.
  for (const ExitInfo& e : d.RunRanks("lonelyload", "save", 1, 2, 1)) REQUIRE(e.ok());
  for (const ExitInfo& e : d.RunRanks("lonelyload", "load", 2, 2, 1, 1)) {
    INFO(e.output);
    CHECK(e.ok());
  }
}

TEST_CASE("a rank SIGKILLed before a save fails the others' save naming it", "[rank_grace]") {
  TestDaemon d;
  REQUIRE(d.Start(kFlags).ok());
  KillRankOne(d, "killed");
  const ExitInfo survivor = RunRank(d, "killed", "save", 0, 2, 1);
  INFO(survivor.output);
  CHECK_FALSE(survivor.ok());
  CHECK(absl::StrContains(survivor.output, Absent(1, "killed")));
  CheckNoSteps(d, "killed");
  for (const ExitInfo& e : d.RunRanks("killed", "save", 2, 2, 1)) {
    INFO(e.output);
    CHECK(e.ok());
  }
}

TEST_CASE("a rank SIGKILLed before a load fails the others' load naming it", "[rank_grace]") {
  TestDaemon d;
  REQUIRE(d.Start(kFlags).ok());
  for (const ExitInfo& e : d.RunRanks("killedload", "save", 1, 1, 1)) REQUIRE(e.ok());
  KillRankOne(d, "killedload");
  const ExitInfo survivor = RunRank(d, "killedload", "load", 0, 2, 1);
  INFO(survivor.output);
  CHECK_FALSE(survivor.ok());
  CHECK(absl::StrContains(survivor.output, Absent(1, "killedload")));
  for (const ExitInfo& e : d.RunRanks("killedload", "load", 2, 1, 1, 1)) {
    INFO(e.output);
    CHECK(e.ok());
  }
}

}  // namespace ckpt::testing
