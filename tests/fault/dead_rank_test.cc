// A rank SIGKILLed while its job saves or loads: the daemon notices the
// closed Watch stream, every other rank's call fails naming the dead rank
// within seconds (not at a timeout), and everything is released.
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

// Rank 1 attaches and hangs; rank 0 starts `mode` with world 2 and waits
// for it; rank 1 is SIGKILLed. Returns rank 0's exit and how long after the
// kill it came.
std::pair<ExitInfo, absl::Duration> KillPeerDuring(TestDaemon& d, const std::string& job,
                                                   const std::string& mode) {
  auto hanging = d.StartRank(job, "attach", 1, 2, 1);
  REQUIRE(hanging->WaitForOutput("attached", absl::Seconds(30)));
  auto survivor = d.StartRank(job, mode, 0, 2, mode == "save" ? 2 : 1);
  // Rank 0 is attached too and waits in the barrier for rank 1.
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.attached_ranks() == 2; }));
  if (mode == "save") {
    REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 1; }));
  } else {
    REQUIRE(
        AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.loads_in_flight() == 1; }));
  }
  const absl::Time killed = absl::Now();
  hanging->Signal(SIGKILL);
  ExitInfo exit = survivor->Wait();
  return {exit, absl::Now() - killed};
}

}  // namespace

TEST_CASE("a rank killed during a save fails the others' saves naming it", "[fault][liveness]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto [exit, took] = KillPeerDuring(d, "deadsave", "save");
  INFO(exit.output);
  CHECK_FALSE(exit.ok());
  CHECK(exit.output.find("rank 1 went away") != std::string::npos);
  CHECK(took < absl::Seconds(5));
  // Nothing committed, nothing held.
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) {
    return s.saves_size() == 0 && s.pool_used_bytes() == 0 && s.attached_ranks() == 0;
  }));
  // And the job saves again with live ranks.
  for (const ExitInfo& e : d.RunRanks("deadsave", "save", 2, 3, 1, 0)) CHECK(e.ok());
}

TEST_CASE("a rank killed during a load fails the others' loads naming it", "[fault][liveness]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (const ExitInfo& e : d.RunRanks("deadload", "save", 1, 1, 1, 0)) REQUIRE(e.ok());
  auto [exit, took] = KillPeerDuring(d, "deadload", "load");
  INFO(exit.output);
  CHECK_FALSE(exit.ok());
  CHECK(exit.output.find("rank 1 went away") != std::string::npos);
  CHECK(took < absl::Seconds(5));
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) {
    return s.pool_used_bytes() == 0 && s.attached_ranks() == 0;
  }));
  for (const ExitInfo& e : d.RunRanks("deadload", "load", 2, 1, 1, 1)) CHECK(e.ok());
}

}  // namespace ckpt::testing
