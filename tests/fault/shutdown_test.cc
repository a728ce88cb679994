// SIGTERM, as systemd sends on stop, while a rank waits in a barrier that can
// never complete (world 2, only rank 0 came): ckptd aborts what is in
// flight, the waiting rank's call fails saying the daemon is shutting down
// instead of hanging, and ckptd exits well inside the unit's TimeoutStopSec
// (read from deploy/ckptd.service, so lowering it there is checked too).
// Committed checkpoints are untouched: a restarted daemon loads them.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

// ckptd gives work in flight this long before aborting it
// (daemon/service/node_daemon.cc, kShutdownGrace).
constexpr absl::Duration kDaemonGrace = absl::Seconds(5);
// Room for a loaded test machine on top of what ckptd itself waits.
constexpr absl::Duration kSlack = absl::Seconds(5);

// TimeoutStopSec of the shipped unit, in seconds ("60" or "60s").
absl::Duration UnitStopTimeout() {
  const std::string unit = std::string(CKPT_TEST_SOURCE_DIR) + "/deploy/ckptd.service";
  std::ifstream in(unit);
  REQUIRE(in.good());
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view value = line;
    if (!absl::ConsumePrefix(&value, "TimeoutStopSec=")) continue;
    absl::ConsumeSuffix(&value, "s");
    int64_t seconds = 0;
    INFO(unit << ": " << line);
    REQUIRE(absl::SimpleAtoi(value, &seconds));
    return absl::Seconds(seconds);
  }
  FAIL(unit << " sets no TimeoutStopSec");
  return absl::ZeroDuration();
}

struct Stopped {
  ExitInfo rank;
  absl::Duration rank_took;
  ExitInfo daemon;
  absl::Duration daemon_took;
};

// Sends SIGTERM to ckptd and waits, with bounds, for `rank` and then the
// daemon to exit. A hang fails the test at the bound instead of hanging it.
Stopped TermAndWait(TestDaemon& d, Subprocess& rank, absl::Duration rank_bound,
                    absl::Duration daemon_bound) {
  Stopped out;
  const absl::Time sent = absl::Now();
  d.Signal(SIGTERM);
  std::optional<ExitInfo> rank_exit = rank.WaitFor(rank_bound);
  out.rank_took = absl::Now() - sent;
  INFO("rank output: " << rank.Output());
  REQUIRE(rank_exit.has_value());  // the blocked call returned
  out.rank = *rank_exit;
  std::optional<ExitInfo> daemon_exit = d.WaitExitFor(daemon_bound - (absl::Now() - sent));
  out.daemon_took = absl::Now() - sent;
  INFO("ckptd output: " << d.Output());
  REQUIRE(daemon_exit.has_value());  // ckptd exited inside the bound
  out.daemon = *daemon_exit;
  return out;
}

void CheckCleanExit(const TestDaemon& d, const Stopped& s) {
  INFO("ckptd output: " << s.daemon.output);
  CHECK(s.daemon.ok());  // exit 0: a stop, not a crash
  CHECK(s.daemon.output.find("signal 15, shutting down") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(d.socket()));
}

}  // namespace

TEST_CASE("SIGTERM during an incomplete load barrier fails the waiting rank and exits",
          "[fault][liveness][shutdown]") {
  const absl::Duration stop_timeout = UnitStopTimeout();
  // Well inside systemd's limit, and not more than ckptd's own grace needs.
  const absl::Duration daemon_bound = std::min(stop_timeout / 4, kDaemonGrace + kSlack);
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (const ExitInfo& e : d.RunRanks("termload", "save", 1, 1, 1)) REQUIRE(e.ok());

  // Rank 0 of 2 asks for step 1 and waits for rank 1, which never comes.
  auto rank0 = d.StartRank("termload", "load", 0, 2, 1);
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) {
    return s.attached_ranks() == 1 && s.loads_in_flight() == 1;
  }));

  // A load barrier has read nothing: it is aborted at once, not after the
  // grace that work in flight gets.
  const Stopped s = TermAndWait(d, *rank0, kSlack, daemon_bound);
  INFO("rank output: " << s.rank.output);
  CHECK_FALSE(s.rank.ok());
  CHECK(s.rank.output.find("rank 0: load:") != std::string::npos);
  CHECK(s.rank.output.find("ckptd is shutting down") != std::string::npos);
  CHECK(s.rank_took < kSlack);
  CHECK(s.daemon_took < daemon_bound);
  CheckCleanExit(d, s);

  // The committed step survives the stop.
  REQUIRE(d.Start().ok());
  for (const ExitInfo& e : d.RunRanks("termload", "load", 2, 1, 1, 1)) {
    INFO(e.output);
    CHECK(e.ok());
  }
}

TEST_CASE("SIGTERM during an incomplete save plan barrier fails the waiting rank and exits",
          "[fault][liveness][shutdown]") {
  const absl::Duration stop_timeout = UnitStopTimeout();
  const absl::Duration daemon_bound = std::min(stop_timeout / 4, kDaemonGrace + 2 * kSlack);
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (const ExitInfo& e : d.RunRanks("termsave", "save", 1, 1, 1)) REQUIRE(e.ok());

  // Rank 0 of 2 sends its plan for step 2 and waits for rank 1's.
  auto rank0 = d.StartRank("termsave", "save", 0, 2, 2);
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) {
    return s.attached_ranks() == 1 && s.saves_size() == 1 && s.saves(0).phase() == "planning";
  }));

  // A save in flight gets ckptd's grace to finish; this one cannot, so it
  // is aborted when the grace ends and the rank hears why.
  const Stopped s = TermAndWait(d, *rank0, kDaemonGrace + kSlack, daemon_bound);
  INFO("rank output: " << s.rank.output);
  CHECK_FALSE(s.rank.ok());
  CHECK(s.rank.output.find("rank 0: snapshot:") != std::string::npos);
  CHECK(s.rank.output.find("save of job termsave step 2 by rank 0") != std::string::npos);
  CHECK(s.rank.output.find("ckptd is shutting down") != std::string::npos);
  CHECK(s.rank_took < kDaemonGrace + kSlack);
  CHECK(s.daemon_took < daemon_bound);
  CheckCleanExit(d, s);

  // Step 1 is still the latest and loads; step 2 left nothing behind.
  REQUIRE(d.Start().ok());
  for (const std::string& name : ListDir(d.job_dir("termsave"))) {
    CHECK(name.find("step-2") == std::string::npos);
    CHECK(name.find(".partial-") == std::string::npos);
  }
  for (const ExitInfo& e : d.RunRanks("termsave", "load", 1, -1, 1, 1)) {
    INFO(e.output);
    CHECK(e.ok());
    CHECK(e.output.find("loaded step 1") != std::string::npos);
  }
}

}  // namespace ckpt::testing
