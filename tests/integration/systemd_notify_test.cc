// ckptd under systemd's Type=notify, with the test as systemd: a datagram
// socket named by NOTIFY_SOCKET receives READY=1, the watchdog's pings at
// WATCHDOG_USEC/2 and STOPPING=1 on SIGTERM.
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  }
  ~NotifySocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  // The next datagram, or "" when none came within `timeout`.
  std::string Receive(absl::Duration timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return "";
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
  }
  // Receives until a datagram contains `text`; everything received is
  // appended to `log`. False if 30 s pass first.
  bool AwaitMessage(const std::string& text, std::string* log) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      const std::string m = Receive(deadline - absl::Now());
      *log += m + "|";
      if (absl::StrContains(m, text)) return true;
    }
    return false;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Sets an environment variable for the daemons this test starts.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST_CASE("ckptd tells systemd it is ready, feeds the watchdog and says when it stops",
          "[systemd]") {
  TestDaemon d;
  NotifySocket notify(d.dir() + "/notify.sock");
  ScopedEnv socket_env("NOTIFY_SOCKET", d.dir() + "/notify.sock");
  ScopedEnv watchdog_env("WATCHDOG_USEC", "200000");  // pings every 100 ms
  REQUIRE(d.Start().ok());
  std::string log;
  REQUIRE(notify.AwaitMessage("READY=1", &log));
  CHECK(absl::StrContains(log, "STATUS=serving"));
  // Pings keep coming while it runs.
  for (int i = 0; i < 3; ++i) {
    INFO(log);
    REQUIRE(notify.AwaitMessage("WATCHDOG=1", &log));
  }
  d.Signal(SIGTERM);
  INFO(log);
  REQUIRE(notify.AwaitMessage("STOPPING=1", &log));
  const ExitInfo exit = d.WaitExit();
  INFO(exit.output);
  CHECK(exit.ok());
}

TEST_CASE("without NOTIFY_SOCKET ckptd runs as before", "[systemd]") {
  unsetenv("NOTIFY_SOCKET");
  TestDaemon d;
  REQUIRE(d.Start().ok());
  CHECK(d.Status().pool_bytes() > 0);
}

}  // namespace
}  // namespace ckpt::testing
