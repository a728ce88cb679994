// A real ckptd process on a temporary storage root, for integration and
// fault tests. Start() returns once the daemon printed that it serves, so
// tests never sleep to wait for it; the root survives restarts (Kill, then
// Start again on the same root) and is removed with the TestDaemon.
#ifndef CKPT_TESTS_SUPPORT_TEST_DAEMON_H_
#define CKPT_TESTS_SUPPORT_TEST_DAEMON_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "ckpt/client.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/support/subprocess.h"

namespace ckpt::testing {

// Paths of the binaries under test: set by CMake, or by the environment
// (CKPTD, CKPT_DEMO_RANK, CKPTCTL) for binaries run outside the build tree.
std::string CkptdPath();
std::string DemoRankPath();
std::string CkptctlPath();

class TestDaemon {
 public:
  TestDaemon();   // creates the temporary directory
  ~TestDaemon();  // kills the daemon, removes the directory and the pool

  // Starts ckptd with the test defaults plus `extra_flags` (later flags win).
  absl::Status Start(const std::vector<std::string>& extra_flags = {});
  // Start() also listening on TCP at 127.0.0.1 on a free port (tried again
  // on another port if one was taken in between), with TLS (a self-signed
  // certificate for 127.0.0.1 made here) and an admin bearer token: TCP
  // serves nothing without both.
  absl::Status StartWithTcp(const std::vector<std::string>& extra_flags = {});
  // The files StartWithTcp made: certificate (also the client's CA), key,
  // admin token and read-only token.
  std::string tls_cert_file() const { return dir_ + "/tls/cert.pem"; }
  std::string tls_key_file() const { return dir_ + "/tls/key.pem"; }
  std::string token_file() const { return dir_ + "/tls/admin.token"; }
  std::string read_token_file() const { return dir_ + "/tls/read.token"; }
  // Makes those files (once; StartWithTcp calls it).
  absl::Status MakeTlsFiles();
  // SIGKILL and reap; returns how it ended.
  ExitInfo Kill();
  // Waits for the daemon to end by itself (e.g. at a fault point).
  ExitInfo WaitExit();
  // Sends `sig` (e.g. SIGTERM, as systemd stops the service).
  void Signal(int sig);
  // WaitExit, giving up (nullopt) if the daemon still runs after `timeout`.
  std::optional<ExitInfo> WaitExitFor(absl::Duration timeout);

  const std::string& dir() const { return dir_; }
  std::string root() const { return dir_ + "/root"; }
  std::string socket() const { return dir_ + "/ckptd.sock"; }
  std::string job_dir(const std::string& job) const { return root() + "/" + job; }
  std::unique_ptr<v1::NodeService::Stub> Stub() const;
  // GetStatus over gRPC; fails the test (REQUIRE) if the daemon does not answer.
  v1::GetStatusResponse Status() const;
  // "127.0.0.1:<port>" once StartWithTcp succeeded.
  const std::string& tcp_address() const { return tcp_address_; }
  // A stub for a gRPC target ("unix:<path>" or "host:port") whose channel
  // sends and receives messages up to 256 MiB, beyond the daemon's limit.
  // A TCP target gets TLS with this daemon's certificate and `token` (the
  // admin token if empty; "none" for no token at all).
  std::unique_ptr<v1::NodeService::Stub> StubFor(const std::string& target,
                                                 const std::string& token = "") const;
  // The channel credentials StubFor uses.
  std::shared_ptr<grpc::ChannelCredentials> CredentialsFor(const std::string& target,
                                                           const std::string& token = "") const;
  // A plaintext TCP stub: for tests that the daemon refuses it.
  static std::unique_ptr<v1::NodeService::Stub> PlaintextStubFor(const std::string& target);
  // The contents of a token file.
  static std::string ReadToken(const std::string& path);
  // The daemon process: alive (not merely answering), and its pid.
  bool Running() const { return process_ != nullptr && process_->Running(); }
  pid_t pid() const { return process_ ? process_->pid() : -1; }
  std::string Output() const { return process_ ? process_->Output() : ""; }
  // Blocks until the daemon's output contains `text` (true), or it exited or
  // `timeout` passed (false): for work it does in the background.
  bool WaitForOutput(const std::string& text, absl::Duration timeout = absl::Seconds(30)) const {
    return process_ != nullptr && process_->WaitForOutput(text, timeout);
  }

  // Starts one demo rank (tools/demo/demo_rank.cc) of `job` in `mode`
  // ("save", "load" or "attach") and returns at once; `saved_world` as for
  // RunRanks. Fails the test (REQUIRE) if it cannot be spawned.
  std::unique_ptr<Subprocess> StartRank(const std::string& job, const std::string& mode, int rank,
                                        int world, int64_t step, int saved_world = 1, int scale = 1,
                                        const std::vector<std::string>& extra_flags = {}) const;
  // Runs `world` demo ranks of `job` in `mode` ("save" or "load") and
  // returns each rank's outcome.
  // `extra_flags` go to every rank (e.g. "--tier=memory").
  std::vector<ExitInfo> RunRanks(const std::string& job, const std::string& mode, int world,
                                 int64_t step, int scale, int saved_world = 0,
                                 const std::vector<std::string>& extra_flags = {}) const;
  // Runs ckptctl against this daemon.
  ExitInfo Ckptctl(const std::vector<std::string>& args) const;

 private:
  // A demo rank's command line.
  std::vector<std::string> RankArgv(const std::string& job, const std::string& mode, int rank,
                                    int world, int64_t step, int saved_world, int scale,
                                    const std::vector<std::string>& extra_flags) const;

  std::string dir_;
  std::string tcp_address_;
  std::unique_ptr<Subprocess> process_;
  bool tls_files_made_ = false;
};

// Asks the daemon's status again and again (an RPC each time, no sleeping)
// until `done(status)`; false after 30 s.
template <typename Pred>
bool AwaitStatus(const TestDaemon& d, Pred done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    if (done(d.Status())) return true;
  }
  return false;
}

// Names of the entries of a directory, sorted; empty if it does not exist.
std::vector<std::string> ListDir(const std::string& path);
// The steps the daemon lists for `job`, asked over gRPC; every one must be
// whole (CHECK: not broken).
std::vector<int64_t> ListedSteps(const TestDaemon& d, const std::string& job);
// The bytes of a listed step (FAILs when it is not listed).
uint64_t CheckpointBytes(const TestDaemon& d, const std::string& job, int64_t step);
// The manifest of a committed step, asked over gRPC (REQUIRE: it answers).
v1::CheckpointManifest InspectManifest(const TestDaemon& d, const std::string& job, int64_t step);
// A client of the daemon as rank `rank` of a job of `world` ranks on its
// host (local rank = rank); REQUIREs that it attached.
std::unique_ptr<Client> AttachRank(const TestDaemon& d, const std::string& job, int rank,
                                   int world);
// Saves `step` of `job` with one demo rank; REQUIREs that it succeeded.
void SaveStep(const TestDaemon& d, const std::string& job, int64_t step);

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_TEST_DAEMON_H_
