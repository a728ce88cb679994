// Crash consistency: ckptd is SIGKILLed (by itself, at named points of the
// save protocol, so the kill lands at an exact step without racing a timer)
// while saving step 2 over a committed step 1. After a restart the previous
// checkpoint loads bit-exact, the interrupted one is neither listed nor
// loadable, and its partial directory is gone. A kill after the commit
// point (rename + directory fsync) must keep the new checkpoint instead.
#include <signal.h>

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

std::vector<std::string> PartialDirs(const TestDaemon& d, const std::string& job) {
  std::vector<std::string> out;
  for (const std::string& name : ListDir(d.job_dir(job))) {
    if (name.find(".partial-") != std::string::npos) out.push_back(name);
  }
  return out;
}

// The first column of each row of `ckptctl list`'s table (after the header).
std::vector<std::string> TableSteps(const std::string& table) {
  std::istringstream lines(table);
  std::string line;
  std::vector<std::string> steps;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string step;
    if (fields >> step) steps.push_back(step);
  }
  return steps;
}

bool HasStep(const TestDaemon& d, const std::string& job, int step) {
  for (const std::string& name : ListDir(d.job_dir(job))) {
    if (name == "step-" + std::to_string(step)) return true;
  }
  return false;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("SIGKILL during a save leaves the previous checkpoint intact", "[fault][crash]") {
  const std::string point =
      GENERATE("save.planned", "save.chunk_written", "save.data_synced", "commit.before_rename");
  INFO("fault point " << point);
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (const ExitInfo& r : d.RunRanks("crash", "save", 4, 1, 2)) {
    INFO(r.output);
    REQUIRE(r.ok());
  }
  d.Kill();

  REQUIRE(d.Start({"--fault_kill_at=" + point}).ok());
  const std::vector<ExitInfo> ranks = d.RunRanks("crash", "save", 4, 2, 2);
  const ExitInfo daemon = d.WaitExit();
  INFO(daemon.output);
  REQUIRE(daemon.signal == SIGKILL);
  REQUIRE(daemon.output.find("fault point " + point) != std::string::npos);
  for (const ExitInfo& r : ranks) CHECK_FALSE(r.ok());  // the save failed for everyone
  // The kill hit mid-save: its partial directory is there, no step-2.
  CHECK(PartialDirs(d, "crash").size() == 1);
  CHECK_FALSE(HasStep(d, "crash", 2));

  REQUIRE(d.Start().ok());
  CHECK(PartialDirs(d, "crash").empty());
  CHECK(d.Output().find("removed 1 stale partial") != std::string::npos);
  const ExitInfo list = d.Ckptctl({"list", "crash"});
  INFO(list.output);
  CHECK(list.ok());
  CHECK(TableSteps(list.output) == std::vector<std::string>{"1"});
  CHECK(ListedSteps(d, "crash") == std::vector<int64_t>{1});

  // Step 2 cannot be loaded; latest is step 1, bit-exact, under another sharding.
  for (const ExitInfo& r : d.RunRanks("crash", "load", 1, 2, 2, 4)) {
    CHECK_FALSE(r.ok());
    CHECK(r.output.find("no committed step 2") != std::string::npos);
  }
  for (const ExitInfo& r : d.RunRanks("crash", "load", 3, -1, 2, 4)) {
    INFO(r.output);
    CHECK(r.ok());
    CHECK(r.output.find("loaded step 1") != std::string::npos);
  }
  // And the interrupted step can be saved again.
  for (const ExitInfo& r : d.RunRanks("crash", "save", 4, 2, 2)) {
    INFO(r.output);
    CHECK(r.ok());
  }
}

TEST_CASE("SIGKILL after the commit point keeps the new checkpoint", "[fault][crash]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (const ExitInfo& r : d.RunRanks("crash", "save", 2, 1, 1)) REQUIRE(r.ok());
  d.Kill();
  REQUIRE(d.Start({"--fault_kill_at=commit.after_rename"}).ok());
  d.RunRanks("crash", "save", 2, 2, 1);
  REQUIRE(d.WaitExit().signal == SIGKILL);
  // The kill came between the durable rename and LATEST: LATEST.next says
  // step 2 is committed, and start-up folds it into LATEST.
  REQUIRE(ReadText(d.job_dir("crash") + "/LATEST") == "1\n");
  REQUIRE(ReadText(d.job_dir("crash") + "/LATEST.next") == "2\n");
  REQUIRE(d.Start().ok());
  CHECK(HasStep(d, "crash", 2));
  CHECK(d.Output().find("LATEST repaired") != std::string::npos);
  CHECK(ReadText(d.job_dir("crash") + "/LATEST") == "2\n");
  CHECK(ListedSteps(d, "crash") == std::vector<int64_t>{1, 2});
  for (const ExitInfo& r : d.RunRanks("crash", "load", 3, -1, 1, 2)) {
    INFO(r.output);
    CHECK(r.ok());
    CHECK(r.output.find("loaded step 2") != std::string::npos);
  }
}

}  // namespace ckpt::testing
