// Per-job quotas: saves in flight, and bytes on disk. Each refusal names the
// quota and its flag, and leaves nothing behind.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

TEST_CASE("a job may have --job_max_saves_in_flight saves at once; the next step is refused",
          "[quota]") {
  TestDaemon d;
  REQUIRE(d.Start({"--job_max_saves_in_flight=1"}).ok());
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

}  // namespace
}  // namespace ckpt::testing
