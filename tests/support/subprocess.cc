#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"

extern char** environ;

namespace ckpt::testing {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return ErrnoStatus(err, absl::StrCat("spawn ", argv[0]));
  }
  return std::unique_ptr<Subprocess>(new Subprocess(pid, fds[0]));
}

Subprocess::Subprocess(pid_t pid, int fd) : pid_(pid) {
  drainer_ = std::thread([this, fd] { Drain(fd); });
}

Subprocess::~Subprocess() {
  if (!reaped_) {
    Signal(SIGKILL);
    Wait();
  }
  if (drainer_.joinable()) drainer_.join();
}

void Subprocess::Drain(int fd) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    absl::MutexLock lock(&mu_);
    output_.append(buffer, n);
  }
  close(fd);
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool Subprocess::WaitForOutput(const std::string& text, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto found = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || output_.find(text) != std::string::npos;
  };
  mu_.AwaitWithTimeout(absl::Condition(&found), timeout);
  return output_.find(text) != std::string::npos;
}

std::string Subprocess::Output() const {
  absl::MutexLock lock(&mu_);
  return output_;
}

void Subprocess::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

bool Subprocess::Running() const {
  if (reaped_) return false;
  siginfo_t info{};
  // WNOWAIT: a later Wait() still reaps it and learns how it ended.
  if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
  return info.si_pid == 0;
}

ExitInfo Subprocess::Wait() {
  if (!reaped_) {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    if (WIFEXITED(status)) exit_.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exit_.signal = WTERMSIG(status);
    if (drainer_.joinable()) drainer_.join();
  }
  exit_.output = Output();
  return exit_;
}

std::optional<ExitInfo> Subprocess::WaitFor(absl::Duration timeout) {
  if (!reaped_) {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&closed_), timeout)) return std::nullopt;
  }
  return Wait();
}

ExitInfo RunCommand(const std::vector<std::string>& argv) {
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv);
  if (!p.ok()) {
    ExitInfo info;
    info.output = p.status().ToString();
    return info;
  }
  return (*p)->Wait();
}

int ThreadCount(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it(absl::StrCat("/proc/", pid, "/task"), ec), end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

int64_t ProcStatusKb(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  const std::string prefix = field + ":";
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size()));
  }
  return -1;
}

}  // namespace ckpt::testing
