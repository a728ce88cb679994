// Crash consistency of garbage collection: ckptd SIGKILLs itself (at named
// points of the delete protocol, daemon/coordinator/retention.h) while
// `ckptctl gc` deletes steps 1 and 2 of four. The deleted steps are never
// listed again, not even half; the kept ones are listed and load bit-exact;
// and the restart finishes the delete, leaving no trash. The same when the
// kill lands in the daemon's own retention run right after a commit.
#include <signal.h>

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

std::vector<std::string> Named(const TestDaemon& d, const std::string& job,
                               const std::string& part) {
  std::vector<std::string> out;
  for (const std::string& name : ListDir(d.job_dir(job))) {
    if (name.find(part) != std::string::npos) out.push_back(name);
  }
  return out;
}

}  // namespace

TEST_CASE("SIGKILL during gc leaves no listed half-checkpoint; a restart finishes the delete",
          "[fault][crash][gc]") {
  const std::string point = GENERATE("gc.after_rename", "gc.mid_remove");
  INFO("fault point " << point);
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (int64_t step = 1; step <= 4; ++step) {
    for (const ExitInfo& r : d.RunRanks("gccrash", "save", 2, step, 1)) {
      INFO(r.output);
      REQUIRE(r.ok());
    }
  }
  const size_t files_per_step = ListDir(d.job_dir("gccrash") + "/step-1/data").size();
  REQUIRE(files_per_step >= 2);
  d.Kill();

  REQUIRE(d.Start({"--fault_kill_at=" + point}).ok());
  const ExitInfo gc = d.Ckptctl({"gc", "gccrash", "--keep-last", "2", "--grace-s", "0"});
  CHECK_FALSE(gc.ok());  // the daemon died under it
  const ExitInfo daemon = d.WaitExit();
  INFO(daemon.output);
  REQUIRE(daemon.signal == SIGKILL);
  REQUIRE(daemon.output.find("fault point " + point) != std::string::npos);

  // Killed between the renames and the end of the removal: steps 1 and 2
  // are trash, whole or partly removed, and no longer step directories.
  const std::vector<std::string> trash = Named(d, "gccrash", ".trash-");
  REQUIRE(trash.size() == 2);
  CHECK(ListDir(d.job_dir("gccrash")) ==
        std::vector<std::string>{trash[0], trash[1], "LATEST", "OWNER", "step-3", "step-4"});
  CHECK(trash[0].rfind(".step-1.trash-testhost-", 0) == 0);
  CHECK(trash[1].rfind(".step-2.trash-testhost-", 0) == 0);
  const size_t left = ListDir(d.job_dir("gccrash") + "/" + trash[0] + "/data").size();
  if (point == "gc.mid_remove") {
    CHECK(left == files_per_step - 1);  // killed after its first file
  } else {
    CHECK(left == files_per_step);
  }

  REQUIRE(d.Start().ok());
  CHECK(d.Output().find("finished deleting 2 steps an interrupted gc had moved to trash") !=
        std::string::npos);
  CHECK(Named(d, "gccrash", "trash").empty());
  CHECK(ListDir(d.job_dir("gccrash")) ==
        std::vector<std::string>{"LATEST", "OWNER", "step-3", "step-4"});
  CHECK(ListedSteps(d, "gccrash") == std::vector<int64_t>{3, 4});
  for (int64_t step : {int64_t{-1}, int64_t{3}}) {
    for (const ExitInfo& r : d.RunRanks("gccrash", "load", 3, step, 1, 2)) {
      INFO(r.output);
      CHECK(r.ok());
      CHECK(r.output.find(step < 0 ? "loaded step 4:" : "loaded step 3:") != std::string::npos);
    }
  }
  // And gc has nothing left to do.
  const ExitInfo again = d.Ckptctl({"gc", "gccrash", "--keep-last", "2", "--grace-s", "0"});
  INFO(again.output);
  CHECK(again.ok());
  CHECK(again.output.find("deleted 0 of 2 steps") != std::string::npos);
}

TEST_CASE("SIGKILL during retention after a commit keeps the commit and the policy",
          "[fault][crash][gc][retention]") {
  TestDaemon d;
  const std::vector<std::string> retain = {"--retain_last=2", "--retain_grace_s=0"};
  std::vector<std::string> flags = retain;
  flags.push_back("--fault_kill_at=gc.mid_remove");
  REQUIRE(d.Start(flags).ok());
  // Retention after step 2 has nothing to delete; after step 3 it deletes
  // step 1 and the daemon dies in the middle of removing it. Step 3's
  // commit came first: whether its rank heard so before the kill is a race
  // this test does not look at.
  for (int64_t step = 1; step <= 2; ++step) {
    for (const ExitInfo& r : d.RunRanks("autocrash", "save", 2, step, 1)) {
      INFO(r.output);
      REQUIRE(r.ok());
    }
  }
  d.RunRanks("autocrash", "save", 2, 3, 1);
  const ExitInfo daemon = d.WaitExit();
  INFO(daemon.output);
  REQUIRE(daemon.signal == SIGKILL);
  REQUIRE(daemon.output.find("fault point gc.mid_remove") != std::string::npos);
  const std::vector<std::string> trash = Named(d, "autocrash", ".trash-");
  REQUIRE(trash.size() == 1);
  CHECK(trash[0].rfind(".step-1.trash-testhost-", 0) == 0);

  REQUIRE(d.Start(retain).ok());
  CHECK(ListDir(d.job_dir("autocrash")) ==
        std::vector<std::string>{"LATEST", "OWNER", "step-2", "step-3"});
  CHECK(ListedSteps(d, "autocrash") == std::vector<int64_t>{2, 3});
  for (const ExitInfo& r : d.RunRanks("autocrash", "load", 3, -1, 1, 2)) {
    INFO(r.output);
    CHECK(r.ok());
    CHECK(r.output.find("loaded step 3:") != std::string::npos);
  }
}

}  // namespace ckpt::testing
