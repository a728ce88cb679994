// Real child processes for integration and fault tests: started with
// posix_spawn, stdout+stderr captured through a pipe that a thread drains
// (so a chatty child never blocks), killable with any signal.
#ifndef CKPT_TESTS_SUPPORT_SUBPROCESS_H_
#define CKPT_TESTS_SUPPORT_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ckpt::testing {

struct ExitInfo {
  int exit_code = -1;  // when the process exited
  int signal = 0;      // when a signal killed it
  std::string output;  // stdout and stderr, interleaved
  bool ok() const { return signal == 0 && exit_code == 0; }
};

class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv);
  ~Subprocess();  // kills (SIGKILL) and reaps a child still running

  pid_t pid() const { return pid_; }
  // The child has not exited (checked without reaping it).
  bool Running() const;
  // Blocks until the output contains `text` (true) or the child closed its
  // output / the deadline passed (false).
  bool WaitForOutput(const std::string& text, absl::Duration timeout);
  std::string Output() const;
  void Signal(int sig);
  // Reaps the child; idempotent.
  ExitInfo Wait();
  // Like Wait, but gives up (nullopt, the child still running) when the
  // child has not exited within `timeout`, so a test asserting "exits
  // promptly" fails instead of hanging. Exit is seen as the output pipe
  // closing, so a child that forked others which keep it open counts as
  // running.
  std::optional<ExitInfo> WaitFor(absl::Duration timeout);

 private:
  Subprocess(pid_t pid, int fd);
  void Drain(int fd);

  const pid_t pid_;
  std::thread drainer_;
  mutable absl::Mutex mu_;
  std::string output_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool reaped_ = false;
  ExitInfo exit_;
};

// Runs a command to completion.
ExitInfo RunCommand(const std::vector<std::string>& argv);

// Threads of a process (entries of /proc/<pid>/task); -1 if it is gone.
int ThreadCount(pid_t pid);
// A "<field>: <n> kB" line of /proc/<pid>/status (VmHWM, RssAnon, ...) in
// kB; -1 if absent.
int64_t ProcStatusKb(pid_t pid, const std::string& field);

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_SUBPROCESS_H_
