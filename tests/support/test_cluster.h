// A coordinator daemon and K node daemons, each a real ckptd process, on
// one shared storage root (the coordinator's), for tests of jobs spread
// over hosts. Nodes talk to the coordinator over loopback TCP with TLS and
// its admin token; ranks attach to their own host's daemon with a local
// world size, as a trainer launched per host does.
#ifndef CKPT_TESTS_SUPPORT_TEST_CLUSTER_H_
#define CKPT_TESTS_SUPPORT_TEST_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/v1/cluster.pb.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {

class TestCluster {
 public:
  // Heartbeats every 0.2 s, a host lost after kHeartbeatTimeoutS.
  static constexpr double kHeartbeatTimeoutS = 1.5;

  // Starts the coordinator and `hosts` nodes named h0, h1, ...; returns once
  // every node is registered and live. `node_flags` go to every node.
  absl::Status Start(int hosts, const std::vector<std::string>& node_flags = {},
                     const std::vector<std::string>& coordinator_flags = {});
  TestDaemon& coordinator() { return coordinator_; }
  TestDaemon& node(int i) { return *nodes_[i]; }
  int hosts() const { return static_cast<int>(nodes_.size()); }
  std::string root() const { return coordinator_.root(); }
  static std::string HostName(int i) { return "h" + std::to_string(i); }

  // Starts node i again (after Kill) with the flags it had plus `extra`.
  absl::Status RestartNode(int i, const std::vector<std::string>& extra = {});
  // Starts the coordinator again (after Kill) on the same port and root,
  // with the flags it had plus `extra`.
  absl::Status RestartCoordinator(const std::vector<std::string>& extra = {});
  // Waits until `live` hosts are registered and live (false after 30 s).
  bool AwaitLiveHosts(int live);
  v1::ClusterStatusResponse Status();

  // Spawns the ranks of a job of sum(ranks_per_host) ranks: host i gets the
  // next ranks_per_host[i] ranks (0: none), each attaching to that host's
  // daemon with local world size ranks_per_host[i]. `modes` overrides the
  // mode of some ranks ("attach": a rank that never saves); `flags` go to
  // every rank (e.g. --layout=parallel --tp=2 --pp=2).
  std::vector<std::unique_ptr<Subprocess>> StartRanks(
      const std::string& job, const std::string& mode, const std::vector<int>& ranks_per_host,
      int64_t step, int saved_world = 0, int scale = 1,
      const std::map<int, std::string>& modes = {}, const std::vector<std::string>& flags = {});
  // The same, waiting for every rank to end.
  std::vector<ExitInfo> RunRanks(const std::string& job, const std::string& mode,
                                 const std::vector<int>& ranks_per_host, int64_t step,
                                 int saved_world = 0, int scale = 1,
                                 const std::vector<std::string>& flags = {});

 private:
  std::vector<std::string> NodeFlags(int i) const;

  TestDaemon coordinator_;
  std::vector<std::string> coordinator_flags_;
  std::vector<std::unique_ptr<TestDaemon>> nodes_;
  std::vector<std::string> node_flags_;
};

// REQUIRE that every rank exited 0, showing every rank's output if not
// (one failure often explains another).
void RequireAllOk(const std::vector<ExitInfo>& ranks);

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_TEST_CLUSTER_H_
