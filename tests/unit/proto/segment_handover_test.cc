// The segment handover's rank side against a scripted daemon on a real
// SEQPACKET socket: good tables arrive whole with working descriptors,
// and every malformed answer is an error that leaks no descriptor.
#include "proto/lib/segment_handover.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/catch.h"

namespace ckpt::segments {
namespace {

int OpenDescriptors() {
  DIR* dir = opendir("/proc/self/fd");
  int n = 0;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n;
}

// A daemon that accepts one connection, reads the request and runs
// `answer` on the connection.
class ScriptedDaemon {
 public:
  explicit ScriptedDaemon(std::function<void(int conn, const std::string& request)> answer) {
    static int counter = 0;
    path_ = absl::StrCat("/tmp/ckpt-seg-test-", getpid(), "-", counter++);
    listen_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path_.data(), path_.size());
    unlink(path_.c_str());
    REQUIRE(bind(listen_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(listen(listen_, 4) == 0);
    thread_ = std::thread([this, answer] {
      const int conn = accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) return;
      char buffer[512];
      const ssize_t got = recv(conn, buffer, sizeof(buffer), 0);
      answer(conn, std::string(buffer, got > 0 ? static_cast<size_t>(got) : 0));
      close(conn);
    });
  }
  ~ScriptedDaemon() {
    shutdown(listen_, SHUT_RDWR);
    thread_.join();
    close(listen_);
    unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int listen_ = -1;
  std::thread thread_;
};

int Memfd(uint64_t bytes) {
  const int fd = memfd_create("seg-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, static_cast<off_t>(bytes)) == 0);
  return fd;
}

// Sends a header, `count` ranges and `fds` as one message, as is.
void SendRaw(int conn, WireHeader header, const std::vector<WireSegment>& ranges,
             const std::vector<int>& fds) {
  std::string body(reinterpret_cast<const char*>(&header), sizeof(header));
  body.append(reinterpret_cast<const char*>(ranges.data()), ranges.size() * sizeof(WireSegment));
  iovec iov{body.data(), body.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(16 * sizeof(int))];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), fds.data(), fds.size() * sizeof(int));
  }
  REQUIRE(sendmsg(conn, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(body.size()));
}

constexpr uint64_t kPool = 64 << 20;

TEST_CASE("a table of many segments arrives whole, in order, with working descriptors",
          "[segments]") {
  const int before = OpenDescriptors();
  std::string asked;
  {
    ScriptedDaemon daemon([&](int conn, const std::string& request) {
      asked = request;
      std::vector<WireSegment> ranges;
      std::vector<int> fds;
      for (uint64_t i = 0; i < 150; ++i) {  // three messages
        ranges.push_back({i * 4096, 4096, i + 7});
        fds.push_back(Memfd(4096));
      }
      REQUIRE(SendSegmentTable(conn, 42, ranges, fds).ok());
      for (int fd : fds) close(fd);
    });
    absl::StatusOr<SegmentTable> table =
        FetchSegmentTable(daemon.path(), "session-1", kPool, absl::Seconds(10));
    INFO(table.status().ToString());
    REQUIRE(table.ok());
    CHECK(asked == "session-1");
    CHECK(table->epoch == 42);
    REQUIRE(table->segments.size() == 150);
    for (uint64_t i = 0; i < 150; ++i) {
      CHECK(table->segments[i].range.offset == i * 4096);
      CHECK(table->segments[i].range.generation == i + 7);
      struct stat st {};
      REQUIRE(fstat(table->segments[i].fd.get(), &st) == 0);
      CHECK(st.st_size == 4096);
    }
  }
  CHECK(OpenDescriptors() == before);
}

TEST_CASE("an empty table is a table", "[segments]") {
  ScriptedDaemon daemon(
      [](int conn, const std::string&) { REQUIRE(SendSegmentTable(conn, 0, {}, {}).ok()); });
  absl::StatusOr<SegmentTable> table =
      FetchSegmentTable(daemon.path(), "s", kPool, absl::Seconds(10));
  REQUIRE(table.ok());
  CHECK(table->segments.empty());
}

TEST_CASE("the daemon's error comes back with its code and text", "[segments]") {
  ScriptedDaemon daemon([](int conn, const std::string&) {
    REQUIRE(SendSegmentError(conn, absl::PermissionDeniedError("not yours")).ok());
  });
  absl::StatusOr<SegmentTable> table =
      FetchSegmentTable(daemon.path(), "s", kPool, absl::Seconds(10));
  CHECK(table.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(table.status().message() == "not yours");
}

TEST_CASE("malformed answers are errors and close every descriptor received", "[segments]") {
  struct Case {
    const char* name;
    std::function<void(int)> answer;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"a segment beyond the pool",
       [](int conn) {
         const int fd = Memfd(4096);
         WireHeader h;
         h.count = 1;
         h.last = 1;
         SendRaw(conn, h, {{kPool, 4096, 1}}, {fd});
         close(fd);
       },
       absl::StatusCode::kInternal},
      {"a length that wraps",
       [](int conn) {
         const int fd = Memfd(4096);
         WireHeader h;
         h.count = 1;
         h.last = 1;
         SendRaw(conn, h, {{4096, ~uint64_t{0}, 1}}, {fd});
         close(fd);
       },
       absl::StatusCode::kInternal},
      {"fewer descriptors than ranges",
       [](int conn) {
         const int fd = Memfd(4096);
         WireHeader h;
         h.count = 2;
         h.last = 1;
         SendRaw(conn, h, {{0, 4096, 1}, {4096, 4096, 2}}, {fd});
         close(fd);
       },
       absl::StatusCode::kInternal},
      {"a count beyond the message",
       [](int conn) {
         const int fd = Memfd(4096);
         WireHeader h;
         h.count = 1000;
         h.last = 1;
         SendRaw(conn, h, {{0, 4096, 1}}, {fd});
         close(fd);
       },
       absl::StatusCode::kInternal},
      {"not a segment table",
       [](int conn) {
         WireHeader h;
         h.magic = 0x12345678;
         h.last = 1;
         SendRaw(conn, h, {}, {});
       },
       absl::StatusCode::kInternal},
      {"a short message", [](int conn) { REQUIRE(send(conn, "x", 1, 0) == 1); },
       absl::StatusCode::kInternal},
      {"closed without an answer", [](int) {}, absl::StatusCode::kUnavailable},
      {"an epoch that changes between messages",
       [](int conn) {
         const int fd = Memfd(4096);
         WireHeader h;
         h.epoch = 1;
         h.count = 1;
         SendRaw(conn, h, {{0, 4096, 1}}, {fd});
         h.epoch = 2;
         h.last = 1;
         SendRaw(conn, h, {{4096, 4096, 1}}, {fd});
         close(fd);
       },
       absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    const int before = OpenDescriptors();
    {
      ScriptedDaemon daemon([&](int conn, const std::string&) { c.answer(conn); });
      absl::StatusOr<SegmentTable> table =
          FetchSegmentTable(daemon.path(), "s", kPool, absl::Seconds(10));
      INFO(c.name << ": " << table.status().ToString());
      CHECK(table.status().code() == c.code);
      CHECK(std::string(table.status().message()).find(daemon.path()) != std::string::npos);
    }
    INFO(c.name);
    CHECK(OpenDescriptors() == before);
  }
}

TEST_CASE("no daemon, a silent one, or a bad request fail with a clear error", "[segments]") {
  absl::StatusOr<SegmentTable> none =
      FetchSegmentTable("/tmp/ckpt-seg-test-nobody", "s", kPool, absl::Seconds(1));
  CHECK(none.status().code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(none.status().message()).find("ckpt-seg-test-nobody") != std::string::npos);

  ScriptedDaemon silent([](int conn, const std::string&) {
    char byte;
    (void)recv(conn, &byte, 1, 0);  // until the client gives up and closes
  });
  absl::StatusOr<SegmentTable> late =
      FetchSegmentTable(silent.path(), "s", kPool, absl::Milliseconds(200));
  CHECK(late.status().code() == absl::StatusCode::kUnavailable);

  CHECK(FetchSegmentTable(silent.path(), "", kPool, absl::Seconds(1)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(FetchSegmentTable(silent.path(), std::string(129, 's'), kPool, absl::Seconds(1))
            .status()
            .code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt::segments
