// memory+durable saves of a job spread over hosts (tier/spread_persist.h): a
// coordinator and two node daemons, each a real ckptd process, four rank
// processes. Each step commits in the hosts' memory; every K-th is then
// copied to storage by every host (its own files) into one directory the
// coordinator commits. The durable copies are checked from storage alone
// (a plain ckptd on the shared root: ckptctl verify) and loaded back by
// the ranks byte for byte; a host lost while copying fails that copy,
// naming the host, and leaves nothing on storage.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/catch.h"
#include "tests/support/test_cluster.h"

namespace ckpt::testing {
namespace {

const std::vector<int> kHosts = {2, 2};  // ranks per host
constexpr int kWorld = 4;
const std::vector<std::string> kNodeFlags = {"--memory_tier_bytes=268435456"};
const std::vector<std::string> kCoordinatorFlags = {"--memory_tier_bytes=67108864",
                                                    "--memory_tier_replicas=1"};

// The committed steps on the shared storage root, and whether any partial
// directory is left there.
std::vector<int64_t> StepsOnStorage(const TestCluster& cluster, const std::string& job,
                                    bool* partial_left) {
  std::vector<int64_t> steps;
  *partial_left = false;
  for (const std::string& name : ListDir(cluster.root() + "/" + job)) {
    if (absl::StrContains(name, ".partial")) *partial_left = true;
    if (absl::StartsWith(name, "step-")) steps.push_back(std::stoll(name.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// The coordinator's line for the durable copy of `step` of `job`.
std::string SpreadPersistLine(const TestDaemon& coordinator, const std::string& job, int64_t step) {
  const std::string prefix = absl::StrCat("spread-persist job=", job, " step=", step, " ");
  if (!coordinator.WaitForOutput(prefix, absl::Seconds(60))) return "";
  const std::string output = coordinator.Output();
  const size_t at = output.find(prefix);
  return output.substr(at, output.find('\n', at) - at);
}

TEST_CASE("Durable every 5 steps over 20 steps of a job spread over hosts",
          "[memory_durable_cluster]") {
  TestCluster cluster;
  const absl::Status started = cluster.Start(2, kNodeFlags, kCoordinatorFlags);
  INFO(started.ToString());
  REQUIRE(started.ok());
  // Steps 1..20, each to memory, every 5th to memory and storage
  // (ckpt::TierForStep): each save returns at its memory commit.
  RequireAllOk(
      cluster.RunRanks("policy", "save", kHosts, 1, 0, 1, {"--steps=20", "--durable_every=5"}));
  // Each host persists in step order: step 20's line comes last.
  for (int64_t step : {5, 10, 15, 20}) {
    const std::string line = SpreadPersistLine(cluster.coordinator(), "policy", step);
    INFO(cluster.coordinator().Output());
    CHECK(absl::StrContains(line, "hosts=2"));
    CHECK(absl::StrContains(line, "outcome=ok"));
  }
  bool partial_left = true;
  CHECK(StepsOnStorage(cluster, "policy", &partial_left) == std::vector<int64_t>{5, 10, 15, 20});
  CHECK_FALSE(partial_left);
  for (int i = 0; i < 2; ++i) {
    INFO("host " << i);
    const v1::GetStatusResponse s = cluster.node(i).Status();
    CHECK(s.memory_persists() == 4);
    CHECK(s.memory_persist_failures() == 0);
    // Step 20 is in memory too: committed in both tiers.
    REQUIRE(s.memory_tier_jobs_size() == 1);
    const auto& steps = s.memory_tier_jobs(0).steps();
    CHECK(std::find(steps.begin(), steps.end(), 20) != steps.end());
  }

  // From storage alone: a ckptd with no memory tier on the shared root
  // lists the four steps, latest 20, and verifies every chunk of each.
  TestDaemon storage;
  REQUIRE(storage.Start({"--storage_root=" + cluster.root(), "--host_name=verifier"}).ok());
  CHECK(ListedSteps(storage, "policy") == std::vector<int64_t>{5, 10, 15, 20});
  for (int64_t step : {5, 10, 15, 20}) {
    const ExitInfo verified = storage.Ckptctl({"verify", "policy", std::to_string(step)});
    INFO("step " << step << ": " << verified.output);
    CHECK(verified.ok());
  }
  const ExitInfo latest = storage.Ckptctl({"verify", "policy", "latest"});
  CHECK(latest.ok());

  // The spread ranks load step 10 from storage, every byte checked.
  std::vector<ExitInfo> loaded =
      cluster.RunRanks("policy", "load", kHosts, 10, kWorld, 1, {"--from=durable"});
  RequireAllOk(loaded);
  for (const ExitInfo& r : loaded) {
    INFO(r.output);
    CHECK(absl::StrContains(r.output, "loaded step 10"));
    CHECK(absl::StrContains(r.output, "tiers=durable"));
  }
}

TEST_CASE("A host lost while copying a spread step to storage fails the copy, naming it",
          "[memory_durable_cluster]") {
  TestCluster cluster;
  REQUIRE(cluster.Start(2, kNodeFlags, kCoordinatorFlags).ok());
  // h1 dies once its files of the step are on storage, before it reports.
  cluster.node(1).Kill();
  REQUIRE(cluster.RestartNode(1, {"--fault_kill_at=persist.spread_copied"}).ok());
  REQUIRE(cluster.AwaitLiveHosts(2));
  // The save commits in memory; its ranks are told so.
  RequireAllOk(cluster.RunRanks("lost", "save", kHosts, 5, 0, 1, {"--tier=both"}));
  const std::string line = SpreadPersistLine(cluster.coordinator(), "lost", 5);
  INFO(cluster.coordinator().Output());
  CHECK(absl::StrContains(line, "outcome=failed"));
  CHECK(absl::StrContains(line, "host h1 was lost"));
  // h0 was told, naming h1.
  REQUIRE(cluster.node(0).WaitForOutput("persist job=lost step=5 "));
  {
    const std::string output = cluster.node(0).Output();
    const size_t at = output.find("persist job=lost step=5 ");
    const std::string h0_line = output.substr(at, output.find('\n', at) - at);
    INFO(h0_line);
    CHECK(absl::StrContains(h0_line, "outcome=failed"));
    CHECK(absl::StrContains(h0_line, "host h1"));
  }
  // Nothing on storage: no step, no partial directory.
  bool partial_left = true;
  CHECK(StepsOnStorage(cluster, "lost", &partial_left).empty());
  CHECK_FALSE(partial_left);
  CHECK(cluster.node(0).Status().memory_persist_failures() == 1);

  // h1 back (empty), the next memory+durable step persists everywhere.
  cluster.node(1).WaitExit();
  REQUIRE(cluster.RestartNode(1).ok());
  REQUIRE(cluster.AwaitLiveHosts(2));
  RequireAllOk(cluster.RunRanks("lost", "save", kHosts, 6, 0, 1, {"--tier=both"}));
  CHECK(absl::StrContains(SpreadPersistLine(cluster.coordinator(), "lost", 6), "outcome=ok"));
  CHECK(StepsOnStorage(cluster, "lost", &partial_left) == std::vector<int64_t>{6});
  CHECK_FALSE(partial_left);
}

}  // namespace
}  // namespace ckpt::testing
