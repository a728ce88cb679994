// The peer data channel on real TCP sockets (127.0.0.1): bytes arrive
// bit-exact where the receiver said; a sender without the right token, a
// hostile or broken sender, and a silent one each fail only their own
// transfer, with the peer named, and the receiver goes on serving. What a
// host on the data network can do without a key: peer_attack_test.cc.
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/peer/peer_receiver.h"
#include "daemon/peer/peer_sender.h"
#include "daemon/peer/peer_socket.h"
#include "tests/catch.h"
#include "tests/unit/daemon/peer/raw_peer.h"

namespace ckpt::peer {
namespace {

TEST_CASE("Blocks from several senders arrive bit-exact, each where its transfer said", "[peer]") {
  auto receiver = StartReceiver({.max_frame_bytes = 1 << 20});
  constexpr int kTransfers = 4;
  std::vector<std::vector<char>> sources, destinations;
  std::vector<ExpectedTransfer> transfers;
  for (int t = 0; t < kTransfers; ++t) {
    const size_t bytes = (t == 0) ? 0 : (size_t{3} << 20) + 12345 * t;  // one empty transfer
    sources.push_back(RandomBytes(bytes, 7 + t));
    destinations.emplace_back(bytes, 0);
    transfers.push_back(
        receiver->Expect(absl::StrCat("transfer ", t), destinations.back().data(), bytes));
  }
  std::vector<std::thread> senders;
  std::vector<absl::Status> sent(kTransfers);
  for (int t = 0; t < kTransfers; ++t) {
    senders.emplace_back([&, t] {
      // Out of order, in uneven blocks, some larger than a frame.
      const std::vector<char>& src = sources[t];
      std::vector<PeerBlockRef> blocks;
      const uint64_t n = src.size();
      const uint64_t cuts[] = {0, n / 3, n / 3 + 1, n};
      for (int i = 2; i >= 0; --i) {
        blocks.push_back({cuts[i], src.data() + cuts[i], cuts[i + 1] - cuts[i]});
      }
      if (n == 0) blocks.clear();
      sent[t] = PeerSend(AddressOf(*receiver), transfers[t]->token(), blocks,
                         {.max_frame_bytes = 1 << 20});
    });
  }
  for (auto& s : senders) s.join();
  for (int t = 0; t < kTransfers; ++t) {
    INFO("transfer " << t << ": " << sent[t].ToString());
    CHECK(sent[t].ok());
    CHECK(transfers[t]->Wait(absl::Now() + absl::Seconds(10)).ok());
    CHECK(transfers[t]->received() == sources[t].size());
    CHECK(destinations[t] == sources[t]);
  }
  const PeerReceiverStats stats = receiver->Stats();
  CHECK(stats.transfers_completed == kTransfers);
  CHECK(stats.transfers_failed == 0);
  CHECK(stats.connections_refused == 0);
}

TEST_CASE("A token is good for one transfer, and only the right one", "[peer]") {
  auto receiver = StartReceiver();
  std::vector<char> src = RandomBytes(4096, 1), dst(4096, 0);
  auto transfer = receiver->Expect("load", dst.data(), dst.size());
  const PeerBlockRef block{0, src.data(), src.size()};

  // The right id with a wrong key: refused, the transfer untouched.
  PeerToken forged = transfer->token();
  forged.key[kKeyBytes - 1] ^= 1;
  absl::Status wrong = PeerSend(AddressOf(*receiver), forged, {&block, 1});
  CHECK(wrong.code() == absl::StatusCode::kPermissionDenied);
  CHECK(receiver->Stats().hellos_rejected == 1);
  CHECK_THAT(std::string(wrong.message()), Catch::Contains(AddressOf(*receiver)));
  CHECK(transfer->received() == 0);
  // A made-up token: refused too.
  CHECK(PeerSend(AddressOf(*receiver), PeerToken{}, {&block, 1}).code() ==
        absl::StatusCode::kPermissionDenied);

  // The real one: accepted once.
  REQUIRE(PeerSend(AddressOf(*receiver), transfer->token(), {&block, 1}).ok());
  REQUIRE(transfer->Wait(absl::Now() + absl::Seconds(5)).ok());
  CHECK(dst == src);
  CHECK(PeerSend(AddressOf(*receiver), transfer->token(), {&block, 1}).code() ==
        absl::StatusCode::kPermissionDenied);
  CHECK(receiver->Stats().connections_refused == 3);
}

TEST_CASE("A frame outside the destination or over the limit fails that transfer only", "[peer]") {
  auto receiver = StartReceiver({.max_frame_bytes = 1 << 16});
  std::vector<char> dst(1 << 16, 'x');
  auto untouched = [&] {
    return std::all_of(dst.begin(), dst.end(), [](char c) { return c == 'x'; });
  };
  SECTION("past the end") {
    auto transfer = receiver->Expect("load A", dst.data(), dst.size());
    RawPeer raw(*receiver);
    raw.Hello(transfer->token());
    raw.Header(dst.size() - 10, 11, kLastFrame);
    const absl::Status s = transfer->Wait(absl::Now() + absl::Seconds(5));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("load A from 127.0.0.1:"));
    CHECK_THAT(std::string(s.message()), Catch::Contains("[65526, +11)"));
    CHECK(untouched());
  }
  SECTION("an offset near 2^64") {
    auto transfer = receiver->Expect("load B", dst.data(), dst.size());
    RawPeer raw(*receiver);
    raw.Hello(transfer->token());
    raw.Header(~uint64_t{0} - 4, 16, 0);
    CHECK(transfer->Wait(absl::Now() + absl::Seconds(5)).code() ==
          absl::StatusCode::kInvalidArgument);
    CHECK(untouched());
  }
  SECTION("a frame longer than the limit") {
    auto transfer = receiver->Expect("load C", dst.data(), dst.size());
    RawPeer raw(*receiver);
    raw.Hello(transfer->token());
    raw.Header(0, 0xFFFFFFFFu, 0);
    const absl::Status s = transfer->Wait(absl::Now() + absl::Seconds(5));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("the limit is 65536"));
    CHECK(untouched());
  }
  SECTION("an end before every byte arrived") {
    auto transfer = receiver->Expect("load D", dst.data(), dst.size());
    std::vector<char> half(dst.size() / 2, 'h');
    const PeerBlockRef block{0, half.data(), half.size()};
    CHECK(PeerSend(AddressOf(*receiver), transfer->token(), {&block, 1}).code() ==
          absl::StatusCode::kDataLoss);
    const absl::Status s = transfer->Wait(absl::Now() + absl::Seconds(5));
    CHECK(s.code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(s.message()), Catch::Contains("32768 of 65536"));
  }
  // The receiver still serves.
  std::vector<char> src = RandomBytes(dst.size(), 3);
  auto good = receiver->Expect("load E", dst.data(), dst.size());
  const PeerBlockRef block{0, src.data(), src.size()};
  REQUIRE(PeerSend(AddressOf(*receiver), good->token(), {&block, 1}).ok());
  REQUIRE(good->Wait(absl::Now() + absl::Seconds(5)).ok());
  CHECK(dst == src);
}

TEST_CASE("A sender that goes away or goes quiet fails its transfer within the timeouts",
          "[peer]") {
  auto receiver = StartReceiver(
      {.hello_timeout = absl::Milliseconds(300), .idle_timeout = absl::Milliseconds(300)});
  std::vector<char> dst(1 << 20, 0);
  SECTION("closed mid-frame") {
    auto transfer = receiver->Expect("load F", dst.data(), dst.size());
    {
      RawPeer raw(*receiver);
      raw.Hello(transfer->token());
      raw.Header(0, 1 << 20, kLastFrame);
      std::vector<char> part(1000, 'p');
      raw.Send(part.data(), part.size());
    }  // closed
    const absl::Status s = transfer->Wait(absl::Now() + absl::Seconds(5));
    CHECK(s.code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(s.message()), Catch::Contains("the sender closed the connection"));
  }
  SECTION("silent after its hello") {
    auto transfer = receiver->Expect("load G", dst.data(), dst.size());
    RawPeer raw(*receiver);
    raw.Hello(transfer->token());
    const absl::Time start = absl::Now();
    const absl::Status s = transfer->Wait(absl::Now() + absl::Seconds(5));
    CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(absl::Now() - start < absl::Seconds(3));
  }
  SECTION("never connected: Wait's deadline") {
    auto transfer = receiver->Expect("load H", dst.data(), dst.size());
    const absl::Status s = transfer->Wait(absl::Now() + absl::Milliseconds(100));
    CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK_THAT(std::string(s.message()), Catch::Contains("0 of 1048576 bytes"));
    // Too late now: the token is dead.
    std::vector<char> src(dst.size(), 's');
    const PeerBlockRef block{0, src.data(), src.size()};
    CHECK(!PeerSend(AddressOf(*receiver), transfer->token(), {&block, 1}).ok());
    CHECK(dst[0] == 0);
  }
  SECTION("connections that never say hello, or say something else") {
    RawPeer silent(*receiver);
    RawPeer garbage(*receiver);
    garbage.Send("GET / HTTP/1.1\r\n\r\n0123456789012345678901234567890", 48);
    auto transfer = receiver->Expect("load I", dst.data(), dst.size());
    std::vector<char> src = RandomBytes(dst.size(), 9);
    const PeerBlockRef block{0, src.data(), src.size()};
    REQUIRE(PeerSend(AddressOf(*receiver), transfer->token(), {&block, 1}).ok());
    REQUIRE(transfer->Wait(absl::Now() + absl::Seconds(5)).ok());
    CHECK(dst == src);
  }
}

// Polls until the sender's hello was taken (one check per millisecond).
void AwaitConnected(const ExpectedTransfer& transfer) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!transfer->connected()) {
    REQUIRE(absl::Now() < deadline);
    absl::SleepFor(absl::Milliseconds(1));
  }
}

TEST_CASE("Cancel cuts a sender off and returns once the destination is left alone", "[peer]") {
  // A long idle timeout: only Cancel can end the connection's wait.
  auto receiver = StartReceiver({.idle_timeout = absl::Seconds(60)});
  std::vector<char> dst(1 << 20, 0);
  auto transfer = receiver->Expect("load J", dst.data(), dst.size());
  RawPeer raw(*receiver);
  raw.Hello(transfer->token());
  raw.Header(0, 1 << 20, kLastFrame);
  raw.Send("abc", 3);
  AwaitConnected(transfer);
  const absl::Time start = absl::Now();
  transfer->Cancel(absl::CancelledError("the load failed elsewhere"));
  CHECK(absl::Now() - start < absl::Seconds(5));
  const absl::Status s = transfer->Wait(absl::Now() + absl::Seconds(1));
  CHECK(s.code() == absl::StatusCode::kCancelled);
  CHECK_THAT(std::string(s.message()), Catch::Contains("failed elsewhere"));
}

TEST_CASE("A dropped transfer is cancelled: its connection stops before the memory goes",
          "[peer]") {
  auto receiver = StartReceiver({.idle_timeout = absl::Seconds(60)});
  auto dst = std::make_unique<std::vector<char>>(1 << 20, 0);
  std::optional<ExpectedTransfer> transfer;
  transfer.emplace(receiver->Expect("load K", dst->data(), dst->size()));
  RawPeer raw(*receiver);
  raw.Hello((*transfer)->token());
  raw.Header(0, 1 << 20, kLastFrame);
  raw.Send("abc", 3);
  AwaitConnected(*transfer);
  const absl::Time start = absl::Now();
  transfer.reset();  // returns only once the connection left the memory alone
  CHECK(absl::Now() - start < absl::Seconds(5));
  dst.reset();
  // The connection was cut: past the Ready it got with its hello, the
  // sender sees it closed, not an OK.
  std::array<char, kAckBytes> ack;
  const absl::Status answer = raw.Answer(&ack, absl::Seconds(10));
  CHECK(answer.code() == absl::StatusCode::kUnavailable);
  // Counted by the connection's thread as it lets go, which may be just
  // after the sender saw the cut: polled, with a bound.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (receiver->Stats().transfers_failed == 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  CHECK(receiver->Stats().transfers_failed == 1);
}

TEST_CASE("Frames that go back or overlap fail the transfer", "[peer]") {
  auto receiver = StartReceiver();
  std::vector<char> dst(8, 0);
  auto transfer = receiver->Expect("load L", dst.data(), dst.size());
  RawPeer raw(*receiver);
  raw.Hello(transfer->token());
  // [0, 4) twice adds up to 8 bytes, but [4, 8) was never written.
  raw.Frame(0, "aaaa", 0);
  raw.Frame(0, "bbbb", kLastFrame);
  const absl::Status s = transfer->Wait(absl::Now() + absl::Seconds(5));
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("before the end of the previous one"));
  // The sender refuses overlapping blocks itself.
  std::vector<char> src(8, 's');
  const PeerBlockRef overlapping[] = {{0, src.data(), 5}, {4, src.data() + 4, 4}};
  auto other = receiver->Expect("load M", dst.data(), dst.size());
  CHECK(PeerSend(AddressOf(*receiver), other->token(), overlapping).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("A hello dripped a byte at a time is cut off at the hello deadline", "[peer]") {
  auto receiver = StartReceiver({.hello_timeout = absl::Milliseconds(500)});
  RawPeer slow(*receiver);
  const absl::Time start = absl::Now();
  // One byte every 100 ms: each recv is well inside any per-call timeout.
  bool cut = false;
  for (int i = 0; i < 40 && !cut; ++i) {
    cut = ::send(slow.fd, "C", 1, MSG_NOSIGNAL) != 1;
    absl::SleepFor(absl::Milliseconds(100));
    char byte;
    cut = cut || ::recv(slow.fd, &byte, 1, MSG_DONTWAIT) == 0;
  }
  CHECK(cut);
  CHECK(absl::Now() - start < absl::Seconds(3));
  CHECK(receiver->Stats().connections_refused == 1);
}

TEST_CASE("More connections than allowed are refused, not queued", "[peer]") {
  auto receiver = StartReceiver({.hello_timeout = absl::Seconds(5), .max_connections = 2});
  RawPeer a(*receiver), b(*receiver), c(*receiver);
  char byte;
  // The third is closed by the receiver at once: recv sees the end.
  SetTimeouts(c.fd, absl::Seconds(5), absl::Seconds(5));
  CHECK(::recv(c.fd, &byte, 1, 0) == 0);
  CHECK(receiver->Stats().connections_refused >= 1);
}

// The master secret of a load spread over hosts, as the coordinator sends it.
const std::string kSecret = "0123456789abcdef";

// A transfer of load `load`, as its hosts derive them.
PeerToken LoadToken(uint64_t load, uint32_t group) {
  return TransferToken(load, group, 0, 1, kSecret);
}

TEST_CASE("A sender ahead of its receiver waits while its load's prefix is open", "[peer]") {
  auto receiver = StartReceiver({.hello_timeout = absl::Seconds(5)});
  std::shared_ptr<void> open = receiver->OpenPrefix(1, kSecret);
  const PeerToken token = LoadToken(1, 7);
  std::vector<char> src = RandomBytes(1 << 20, 11), dst(src.size(), 0);
  const PeerBlockRef block{0, src.data(), src.size()};
  // The send starts before the transfer is expected (or, scheduled late,
  // after): either way it lands.
  absl::Status sent;
  std::thread sender([&] { sent = PeerSend(AddressOf(*receiver), token, {&block, 1}); });
  auto transfer = receiver->Expect("load N", dst.data(), dst.size(), token);
  REQUIRE(transfer->Wait(absl::Now() + absl::Seconds(10)).ok());
  sender.join();
  CHECK(sent.ok());
  CHECK(dst == src);
}

TEST_CASE("A sender ahead of its receiver's load waits for the prefix to open", "[peer]") {
  auto receiver = StartReceiver({.hello_timeout = absl::Seconds(5)});
  const PeerToken token = LoadToken(4, 7);
  std::vector<char> src = RandomBytes(4096, 12), dst(src.size(), 0);
  const PeerBlockRef block{0, src.data(), src.size()};
  absl::Status sent;
  std::thread sender([&] { sent = PeerSend(AddressOf(*receiver), token, {&block, 1}); });
  // This host got its part of the load after the sender got its own.
  std::shared_ptr<void> open = receiver->OpenPrefix(4, kSecret);
  auto transfer = receiver->Expect("load O", dst.data(), dst.size(), token);
  REQUIRE(transfer->Wait(absl::Now() + absl::Seconds(10)).ok());
  sender.join();
  CHECK(sent.ok());
  CHECK(dst == src);
}

TEST_CASE("A waiting sender is refused once its load closes the prefix", "[peer]") {
  auto receiver = StartReceiver({.hello_timeout = absl::Milliseconds(500)});
  std::shared_ptr<void> open = receiver->OpenPrefix(2, kSecret);
  std::vector<char> src(4096, 'x');
  const PeerBlockRef block{0, src.data(), src.size()};
  const absl::Time start = absl::Now();
  absl::Status sent;
  std::thread sender([&] { sent = PeerSend(AddressOf(*receiver), LoadToken(2, 9), {&block, 1}); });
  open.reset();  // the load ended (or failed): nothing more is expected
  sender.join();
  CHECK(sent.code() == absl::StatusCode::kPermissionDenied);
  CHECK(absl::Now() - start < absl::Seconds(10));  // not the 120 s claim timeout
  // Another load's prefix never opened: refused at the hello timeout.
  CHECK(PeerSend(AddressOf(*receiver), LoadToken(3, 9), {&block, 1}).code() ==
        absl::StatusCode::kPermissionDenied);
}

// A memfd holding `bytes` (a memory-tier file's kind of descriptor).
int MemfdWith(const std::vector<char>& bytes) {
  const int fd = memfd_create("peer-file", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, bytes.data(), bytes.size(), 0) == ssize_t(bytes.size()));
  return fd;
}

TEST_CASE("Blocks sent from a file arrive bit-exact beside blocks from memory", "[peer]") {
  auto receiver = StartReceiver({.max_frame_bytes = 1 << 20});
  const std::vector<char> file_bytes = RandomBytes((5 << 20) + 333, 21);
  const std::vector<char> memory = RandomBytes(70000, 22);
  const int file = MemfdWith(file_bytes);
  // A block past a frame, one from memory between, one from the file's end.
  const uint64_t first = (2 << 20) + 7, last = 4096;
  const uint64_t total = first + memory.size() + last;
  std::vector<char> dst(total, 0);
  auto transfer = receiver->Expect("load F1", dst.data(), dst.size());
  std::vector<PeerBlockRef> blocks(3);
  blocks[0] = {.offset = 0, .length = first, .file = file, .file_offset = 1000};
  blocks[1] = {.offset = first, .data = memory.data(), .length = memory.size()};
  blocks[2] = {.offset = first + memory.size(),
               .length = last,
               .file = file,
               .file_offset = file_bytes.size() - last};
  const absl::Status sent =
      PeerSend(AddressOf(*receiver), transfer->token(), blocks, {.max_frame_bytes = 1 << 20});
  INFO(sent.ToString());
  REQUIRE(sent.ok());
  REQUIRE(transfer->Wait(absl::Now() + absl::Seconds(10)).ok());
  std::vector<char> expected(file_bytes.begin() + 1000, file_bytes.begin() + 1000 + first);
  expected.insert(expected.end(), memory.begin(), memory.end());
  expected.insert(expected.end(), file_bytes.end() - last, file_bytes.end());
  CHECK(dst == expected);

  // A file shorter than its block says: the send fails naming it, and the
  // receiver fails that transfer only.
  std::vector<char> other(8192, 0);
  auto short_transfer = receiver->Expect("load F2", other.data(), other.size());
  const PeerBlockRef past_end{
      .offset = 0, .length = other.size(), .file = file, .file_offset = file_bytes.size() - 100};
  const absl::Status cut = PeerSend(AddressOf(*receiver), short_transfer->token(), {&past_end, 1});
  CHECK(!cut.ok());
  CHECK_THAT(std::string(cut.message()), Catch::Contains("bytes early"));
  CHECK(!short_transfer->Wait(absl::Now() + absl::Seconds(10)).ok());
  ::close(file);
}

TEST_CASE("Sending a file to a peer that hung up fails, without SIGPIPE", "[peer]") {
  // sendfile has no MSG_NOSIGNAL: the default SIGPIPE would end this
  // process (as it would the daemon) were it raised.
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  ::close(pair[1]);
  const int file = MemfdWith(RandomBytes(1 << 16, 23));
  sigset_t before;
  REQUIRE(pthread_sigmask(SIG_SETMASK, nullptr, &before) == 0);
  const absl::Status s = SendFileFull(pair[0], file, 0, 1 << 16, "the test's peer");
  CHECK(!s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("the test's peer"));
  // Nothing left pending, and this thread's mask as it was.
  sigset_t pending, after;
  REQUIRE(sigpending(&pending) == 0);
  CHECK(!sigismember(&pending, SIGPIPE));
  REQUIRE(pthread_sigmask(SIG_SETMASK, nullptr, &after) == 0);
  CHECK(sigismember(&after, SIGPIPE) == sigismember(&before, SIGPIPE));
  ::close(pair[0]);
  ::close(file);
}

TEST_CASE("A receiver that takes nothing cuts a file send off at the idle timeout", "[peer]") {
  // A receiver (it knows the key) that says Ready, frames unMAC'd: the
  // file goes with sendfile. Then it never reads.
  int port = 0;
  absl::StatusOr<int> listener = ListenTcp("127.0.0.1:0", &port);
  REQUIRE(listener.ok());
  const PeerToken token{};
  std::thread stranger([fd = *listener, &token] {
    const int conn = ::accept(fd, nullptr, nullptr);
    if (conn < 0) return;
    char hello[kHelloBytes];
    HelloFields fields;
    if (!ReadFull(conn, hello, sizeof hello, "the sender").ok() ||
        !ParseHello(hello, &fields).ok()) {
      ::close(conn);
      return;
    }
    Nonce own{};
    FrameMac session(SessionKey(token.key, fields.nonce, own));
    std::array<char, kReadyBytes> ready = EncodeReady(session, kReady, own);
    iovec iov{ready.data(), ready.size()};
    (void)WriteFull(conn, &iov, 1, "the sender");
    pollfd closed{conn, POLLRDHUP, 0};  // takes nothing; waits for the sender to close
    (void)::poll(&closed, 1, 30000);
    ::close(conn);
  });
  // 256 MiB of a sparse memfd: far more than the socket buffers hold.
  const int file = memfd_create("peer-stall", MFD_CLOEXEC);
  REQUIRE(file >= 0);
  REQUIRE(::ftruncate(file, 256 << 20) == 0);
  const PeerBlockRef block{.offset = 0, .length = 256 << 20, .file = file, .file_offset = 0};
  const absl::Time start = absl::Now();
  const absl::Status s =
      PeerSend(absl::StrCat("127.0.0.1:", port), token, {&block, 1},
               {.idle_timeout = absl::Milliseconds(300), .claim_timeout = absl::Seconds(5)});
  CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::Now() - start < absl::Seconds(10));
  stranger.join();
  ::close(file);
  ::close(*listener);
}

}  // namespace
}  // namespace ckpt::peer
