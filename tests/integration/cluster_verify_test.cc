// `ckptctl verify` of a memory-tier step spread over hosts (issue 37), at the
// cluster's coordinator, which holds only the step's manifest: every host
// checks the files it holds (its own, its replicas, its parity) and the
// answer names each problem by host and file. A coordinator and three node
// daemons, each a real ckptd process; the damage is done in the hosts' own
// memory by corruption points (held_files_verify.h) right before they check.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/catch.h"
#include "tests/support/test_cluster.h"

namespace ckpt::testing {
namespace {

const std::vector<int> kHosts = {2, 1, 1};  // ranks per host: 4 in all
const std::vector<std::string> kNodeFlags = {"--memory_tier_bytes=134217728"};
const std::vector<std::string> kSave = {"--layout=parallel", "--tp=2", "--pp=2", "--tier=memory"};

void Require(const absl::Status& status) {
  INFO(status.ToString());
  REQUIRE(status.ok());
}

ExitInfo Verify(TestCluster& cluster, const std::string& job, int64_t step) {
  return cluster.coordinator().Ckptctl({"verify", job, std::to_string(step)});
}

TEST_CASE("Verify of a replicated memory step spread over hosts checks every copy where it lies",
          "[cluster_verify]") {
  TestCluster cluster;
  REQUIRE(cluster.Start(3, kNodeFlags, {"--memory_tier_bytes=67108864", "--memory_tier_replicas=1"})
              .ok());
  RequireAllOk(cluster.RunRanks("rep", "save", kHosts, 1, 0, 1, kSave));
  {
    const ExitInfo ok = Verify(cluster, "rep", 1);
    INFO(ok.output);
    REQUIRE(ok.ok());
    CHECK(absl::StrContains(ok.output, "OK: "));
    // Each host holds its own files and its predecessor's (R=1).
    for (int i = 0; i < 3; ++i) {
      CHECK(absl::StrContains(ok.output, absl::StrCat("host h", i, ": ")));
    }
  }

  // h1 holds h0's replica (the ring h0, h1, h2 by domain): a byte of it
  // flipped there is named with h1 and the file, and nothing else is.
  cluster.node(1).Kill();
  Require(cluster.RestartNode(1, {"--fault_corrupt_at=verify.flip_replica"}));
  REQUIRE(cluster.AwaitLiveHosts(3));
  RequireAllOk(cluster.RunRanks("rep", "save", kHosts, 2, 0, 1, kSave));
  {
    const ExitInfo bad = Verify(cluster, "rep", 2);
    INFO(bad.output);
    CHECK(bad.exit_code != 0);
    CHECK(absl::StrContains(bad.output, "1 problem(s)"));
    CHECK(absl::StrContains(bad.output, "host h1: data/h0-"));
    CHECK(absl::StrContains(bad.output, "corrupt: the chunk at offset"));
    CHECK(absl::StrContains(bad.output, "fails its CRC32C"));
  }

  // h2's own file gone: missing from h2 (its replica on h0 is still good).
  cluster.node(1).Kill();
  Require(cluster.RestartNode(1));
  cluster.node(2).Kill();
  Require(cluster.RestartNode(2, {"--fault_corrupt_at=verify.drop_own"}));
  REQUIRE(cluster.AwaitLiveHosts(3));
  RequireAllOk(cluster.RunRanks("rep", "save", kHosts, 3, 0, 1, kSave));
  {
    const ExitInfo missing = Verify(cluster, "rep", 3);
    INFO(missing.output);
    CHECK(missing.exit_code != 0);
    CHECK(absl::StrContains(missing.output, "1 problem(s)"));
    CHECK(absl::StrContains(missing.output, "host h2: data/h2-0.bin: missing from host h2"));
    CHECK_FALSE(absl::StrContains(missing.output, "open "));  // not a local open error
  }

  // h0 dies: named unreachable, within the heartbeat timeout and a bit.
  cluster.node(2).Kill();
  Require(cluster.RestartNode(2));
  REQUIRE(cluster.AwaitLiveHosts(3));
  RequireAllOk(cluster.RunRanks("rep", "save", kHosts, 4, 0, 1, kSave));
  cluster.node(0).Kill();
  const absl::Time start = absl::Now();
  const ExitInfo lost = Verify(cluster, "rep", 4);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  INFO(lost.output << "\ntook " << seconds << " s");
  CHECK(lost.exit_code != 0);
  CHECK(absl::StrContains(lost.output, "host h0: unreachable ("));
  CHECK_FALSE(absl::StrContains(lost.output, "host h1:"));
  CHECK(seconds < TestCluster::kHeartbeatTimeoutS + 3);
}

TEST_CASE("Verify of an erasure-coded memory step checks each parity share against its data",
          "[cluster_verify]") {
  TestCluster cluster;
  REQUIRE(
      cluster.Start(3, kNodeFlags, {"--memory_tier_bytes=67108864", "--memory_tier_erasure=2,1"})
          .ok());
  RequireAllOk(cluster.RunRanks("ec", "save", kHosts, 1, 0, 1, kSave));
  {
    const ExitInfo ok = Verify(cluster, "ec", 1);
    INFO(ok.output);
    REQUIRE(ok.ok());
    // k=2, m=1 on three hosts: three stripes, each host the parity of one.
    for (int i = 0; i < 3; ++i) {
      CHECK(absl::StrContains(ok.output, absl::StrCat("host h", i, ": ")));
    }
    CHECK(absl::StrContains(ok.output, "1 parity shares"));
  }

  // A byte of h0's parity flipped: its fold no longer is the code of its
  // stripe's data, and the verify says which host and file.
  cluster.node(0).Kill();
  Require(cluster.RestartNode(0, {"--fault_corrupt_at=verify.flip_parity"}));
  REQUIRE(cluster.AwaitLiveHosts(3));
  RequireAllOk(cluster.RunRanks("ec", "save", kHosts, 2, 0, 1, kSave));
  const ExitInfo bad = Verify(cluster, "ec", 2);
  INFO(bad.output);
  CHECK(bad.exit_code != 0);
  CHECK(absl::StrContains(bad.output, "1 problem(s)"));
  CHECK(absl::StrContains(bad.output, "host h0: parity/"));
  CHECK(absl::StrContains(bad.output, "does not match the data of stripe"));
}

}  // namespace
}  // namespace ckpt::testing
