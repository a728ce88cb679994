#include "tools/bench/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

#include "proto/lib/status_context.h"

namespace ckpt::bench {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv, bool merge_stderr) {
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
    return ErrnoStatus(errno, "pipe2");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
  if (merge_stderr) posix_spawn_file_actions_adddup2(&actions, from_child[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(to_child[0]);
  close(from_child[1]);
  if (err != 0) {
    close(to_child[1]);
    close(from_child[0]);
    return ErrnoStatus(err, absl::StrCat("cannot start ", argv[0]));
  }
  return std::unique_ptr<ChildProcess>(
      new ChildProcess(pid, fdopen(to_child[1], "w"), fdopen(from_child[0], "r")));
}

ChildProcess::~ChildProcess() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  fclose(in_);
  fclose(out_);
}

absl::Status ChildProcess::Send(const std::string& line) {
  if (fprintf(in_, "%s\n", line.c_str()) < 0 || fflush(in_) != 0) {
    return absl::UnavailableError(absl::StrCat("child ", pid_, " went away"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ChildProcess::ReadLine() {
  std::string line;
  for (int c = fgetc(out_); c != EOF; c = fgetc(out_)) {
    if (c == '\n') return line;
    line.push_back(static_cast<char>(c));
  }
  return absl::UnavailableError(absl::StrCat("child ", pid_, " ended; last output: ", line));
}

absl::Status ChildProcess::WaitFor(const std::string& text) {
  std::string seen;
  for (;;) {
    absl::StatusOr<std::string> line = ReadLine();
    if (!line.ok())
      return absl::UnavailableError(absl::StrCat(line.status().message(), "\n", seen));
    seen += *line + "\n";
    if (line->find(text) != std::string::npos) return absl::OkStatus();
  }
}

int ChildProcess::Stop() {
  if (reaped_) return 0;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
  return status;
}

}  // namespace ckpt::bench
