// Child processes of ckpt-bench: the daemon (its output scanned for the
// "serving" line) and the rank workers (commands on stdin, answers on
// stdout, one line each).
#ifndef CKPT_TOOLS_BENCH_CHILD_PROCESS_H_
#define CKPT_TOOLS_BENCH_CHILD_PROCESS_H_

#include <sys/types.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt::bench {

class ChildProcess {
 public:
  // stdin and stdout are pipes to this process; stderr is inherited, or
  // merged into stdout when merge_stderr.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv,
                                                             bool merge_stderr);
  ~ChildProcess();  // SIGKILLs and reaps a child still running

  absl::Status Send(const std::string& line);
  // The next line of output, without the newline; error at EOF.
  absl::StatusOr<std::string> ReadLine();
  // Reads lines until one contains `text`; error at EOF, with what was read.
  absl::Status WaitFor(const std::string& text);
  // SIGTERM, then reap; returns the exit status.
  int Stop();
  pid_t pid() const { return pid_; }

 private:
  ChildProcess(pid_t pid, FILE* in, FILE* out) : pid_(pid), in_(in), out_(out) {}
  pid_t pid_;
  FILE* in_;
  FILE* out_;
  bool reaped_ = false;
};

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_CHILD_PROCESS_H_
