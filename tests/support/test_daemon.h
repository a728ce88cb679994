// A real ckptd process on a temporary storage root, for integration and
// fault tests. Start() returns once the daemon printed that it serves, so
// tests never sleep to wait for it; the root survives restarts (Kill, then
// Start again on the same root) and is removed with the TestDaemon.
#ifndef CKPT_TESTS_SUPPORT_TEST_DAEMON_H_
#define CKPT_TESTS_SUPPORT_TEST_DAEMON_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/support/subprocess.h"

namespace ckpt::testing {

// Paths of the binaries under test (set by CMake).
std::string CkptdPath();
std::string DemoRankPath();
std::string CkptctlPath();

class TestDaemon {
 public:
  TestDaemon();  // creates the temporary directory
  ~TestDaemon();  // kills the daemon, removes the directory and the pool

  // Starts ckptd with the test defaults plus `extra_flags` (later flags win).
  absl::Status Start(const std::vector<std::string>& extra_flags = {});
  // SIGKILL and reap; returns how it ended.
  ExitInfo Kill();
  // Waits for the daemon to end by itself (e.g. at a fault point).
  ExitInfo WaitExit();

  const std::string& dir() const { return dir_; }
  std::string root() const { return dir_ + "/root"; }
  std::string socket() const { return dir_ + "/ckptd.sock"; }
  std::string job_dir(const std::string& job) const { return root() + "/" + job; }
  std::unique_ptr<v1::NodeService::Stub> Stub() const;
  std::string Output() const { return process_ ? process_->Output() : ""; }

  // Runs `world` demo ranks of `job` in `mode` ("save" or "load") and
  // returns each rank's outcome.
  std::vector<ExitInfo> RunRanks(const std::string& job, const std::string& mode, int world,
                                 int64_t step, int scale, int saved_world = 0) const;
  // Runs ckptctl against this daemon.
  ExitInfo Ckptctl(const std::vector<std::string>& args) const;

 private:
  std::string dir_;
  std::string pool_path_;
  std::unique_ptr<Subprocess> process_;
};

// Names of the entries of a directory, sorted; empty if it does not exist.
std::vector<std::string> ListDir(const std::string& path);

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_TEST_DAEMON_H_
