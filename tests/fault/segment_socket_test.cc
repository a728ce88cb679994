// The segment socket (proto/lib/segment_handover.h) against a real ckptd:
// hostile requests get an error each and the daemon keeps serving without
// leaking descriptors; jobs sharing a small pool pass segments between them
// with fresh memory and still save and load bit-exact.
#include <dirent.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/lib/segment_handover.h"
#include "tests/catch.h"
#include "tests/support/http_get.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

int OpenDescriptors(pid_t pid) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n - 2;  // . and ..
}

// A connected SEQPACKET socket to `path`, with a receive timeout.
int Connect(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends `request` as is and returns the error code of the answer (0 for a
// table), or -1 when the daemon closed without answering.
int Exchange(const std::string& path, const std::string& request, std::string* text = nullptr) {
  const int fd = Connect(path);
  REQUIRE(send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
  char buffer[4096];
  const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
  close(fd);
  if (got < static_cast<ssize_t>(sizeof(segments::WireHeader))) return -1;
  segments::WireHeader header;
  std::memcpy(&header, buffer, sizeof(header));
  if (text != nullptr)
    text->assign(buffer + sizeof(header), static_cast<size_t>(got) - sizeof(header));
  return static_cast<int>(header.code);
}

std::string Pattern(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  std::mt19937 rng(seed);
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

std::vector<RawTensor> Tensors(int count, uint64_t bytes, uint32_t seed) {
  std::vector<RawTensor> out;
  for (int i = 0; i < count; ++i) {
    RawTensor t;
    t.shard = Whole(absl::StrCat("t", i), v1::UINT8, {static_cast<int64_t>(bytes)});
    t.bytes = Pattern(bytes, seed * 100 + static_cast<uint32_t>(i));
    out.push_back(std::move(t));
  }
  return out;
}

TEST_CASE("segment socket: hostile requests get errors; the daemon serves on, leaking nothing",
          "[segments]") {
  TestDaemon d;
  REQUIRE(d.Start({"--pool_bytes=16777216", "--pool_segment_bytes=1048576"}).ok());
  auto stub = d.Stub();
  const std::string socket = d.socket() + ".seg";
  v1::AttachResponse attached;
  REQUIRE(AttachRaw(*stub, "victim", 0, 1, &attached).ok());
  REQUIRE(attached.segment_socket() == socket);
  const int before = OpenDescriptors(d.pid());
  REQUIRE(before > 0);

  std::string text;
  CHECK(Exchange(socket, "no-such-session", &text) ==
        static_cast<int>(absl::StatusCode::kNotFound));
  CHECK(text.find("unknown session") != std::string::npos);
  CHECK(Exchange(socket, std::string(4096, 'x'), &text) ==
        static_cast<int>(absl::StatusCode::kInvalidArgument));
  CHECK(text.find("at most 128") != std::string::npos);
  CHECK(Exchange(socket, std::string(), &text) ==
        static_cast<int>(absl::StatusCode::kInvalidArgument));
  CHECK(Exchange(socket, std::string("\0\xff\x01", 3)) ==
        static_cast<int>(absl::StatusCode::kNotFound));
  // A session id that is another job's is answered with that job's
  // segments only to its own uid (auth_test checks other users); here it is
  // a valid table.
  CHECK(Exchange(socket, attached.session_id()) == 0);

  // Silent connections, more than the daemon keeps waiting: the oldest are
  // dropped, a real request is still answered, and every silent one ends.
  std::vector<int> silent;
  for (size_t i = 0; i < 3 * 64; ++i) silent.push_back(Connect(socket));
  absl::StatusOr<segments::SegmentTable> table = segments::FetchSegmentTable(
      socket, attached.session_id(), attached.pool_bytes(), absl::Seconds(10));
  INFO(table.status().ToString());
  CHECK(table.ok());
  for (int fd : silent) {
    char byte;
    CHECK(recv(fd, &byte, 1, 0) == 0);  // closed by the daemon, within its deadline
    close(fd);
  }
  // A burst of random bytes.
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    const std::string junk = Pattern(1 + rng() % 300, static_cast<uint32_t>(i));
    const int code = Exchange(socket, junk);
    CHECK(code > 0);
  }
  REQUIRE(d.Running());
  // No descriptor left behind (the daemon closes each connection once it
  // answered; allow it the moment after our last reply).
  int after = OpenDescriptors(d.pid());
  for (absl::Time end = absl::Now() + absl::Seconds(5); after > before && absl::Now() < end;) {
    std::this_thread::yield();
    after = OpenDescriptors(d.pid());
  }
  CHECK(after <= before);

  // And a real save and load still work, bit-exact.
  RawRank rank(*stub, "after");
  std::vector<RawTensor> tensors = Tensors(2, 3 * kMiB, 9);
  REQUIRE(rank.Save(1, tensors, {}).ok());
  std::vector<RawTensor> back = tensors;
  std::map<std::string, std::string> objects;
  REQUIRE(rank.Load(1, back, objects).ok());
  for (size_t i = 0; i < tensors.size(); ++i) CHECK(back[i].bytes == tensors[i].bytes);
}

TEST_CASE("jobs larger than the pool take turns with its segments and stay bit-exact",
          "[segments]") {
  TestDaemon d;
  // 8 MiB in 16 segments; each job saves 12 MiB per step.
  const std::string metrics = absl::StrCat("127.0.0.1:", FreeTcpPort());
  REQUIRE(d.Start({"--pool_bytes=8388608", "--pool_segment_bytes=524288",
                   "--metrics_address=" + metrics})
              .ok());
  auto stub = d.Stub();
  RawRank a(*stub, "job-a");
  RawRank b(*stub, "job-b");
  std::vector<std::vector<RawTensor>> saved_a, saved_b;
  for (int step = 1; step <= 3; ++step) {
    saved_a.push_back(Tensors(3, 4 * kMiB, static_cast<uint32_t>(step)));
    saved_b.push_back(Tensors(3, 4 * kMiB, static_cast<uint32_t>(step + 50)));
    grpc::Status sa = a.Save(step, saved_a.back(), {});
    INFO(sa.error_message());
    REQUIRE(sa.ok());
    grpc::Status sb = b.Save(step, saved_b.back(), {});
    INFO(sb.error_message());
    REQUIRE(sb.ok());
  }
  // Loads alternate too: each takes the segments the other just used.
  for (int step = 3; step >= 1; --step) {
    for (auto* job : {&a, &b}) {
      const auto& saved = job == &a ? saved_a[step - 1] : saved_b[step - 1];
      std::vector<RawTensor> back = saved;
      for (RawTensor& t : back) t.bytes.assign(t.bytes.size(), '\0');
      std::map<std::string, std::string> objects;
      int64_t loaded = 0;
      grpc::Status s = job->Load(step, back, objects, &loaded);
      INFO(s.error_message());
      REQUIRE(s.ok());
      CHECK(loaded == step);
      for (size_t i = 0; i < saved.size(); ++i) CHECK(back[i].bytes == saved[i].bytes);
    }
  }
  CHECK(d.Status().pool_used_bytes() == 0);
  // The segments did change hands (with fresh memory each time), so the
  // ranks' remapping was exercised by the comparisons above.
  absl::StatusOr<HttpReply> reply = HttpGet(metrics, "/metrics");
  REQUIRE(reply.ok());
  const std::string name = "\nckpt_pool_segment_renewals_total ";
  const size_t at = reply->body.find(name);
  REQUIRE(at != std::string::npos);
  const double renewals = std::stod(reply->body.substr(at + name.size()));
  INFO("segment renewals: " << renewals);
  CHECK(renewals >= 16);
}

TEST_CASE("ranks of two jobs through the client library, at once, through a small pool",
          "[segments]") {
  TestDaemon d;
  REQUIRE(d.Start({"--pool_bytes=8388608", "--pool_segment_bytes=524288"}).ok());
  // Scale 4: ~5.6 MiB per job, two jobs of two ranks saving and then
  // loading at the same time through 8 MiB.
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (const char* job : {"left", "right"}) {
    for (int r = 0; r < 2; ++r) ranks.push_back(d.StartRank(job, "save", r, 2, 7, 2, 4));
  }
  for (auto& rank : ranks) {
    const ExitInfo done = rank->Wait();
    INFO(done.output);
    CHECK(done.ok());
  }
  ranks.clear();
  for (const char* job : {"left", "right"}) {
    for (int r = 0; r < 2; ++r) ranks.push_back(d.StartRank(job, "load", r, 2, 7, 2, 4));
  }
  for (auto& rank : ranks) {
    const ExitInfo done = rank->Wait();
    INFO(done.output);
    CHECK(done.ok());
  }
  CHECK(d.Status().pool_used_bytes() == 0);
}

}  // namespace
}  // namespace ckpt::testing
