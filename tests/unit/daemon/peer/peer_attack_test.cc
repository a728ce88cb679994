// The peer data channel against a host on the data network that holds no
// key (issue 29): it sees every byte of a transfer on the wire, alters or
// injects bytes in flight, opens connections by the hundred, and sends
// hellos of its own. None of that lets it write into a transfer it was
// not given, replay one, take another host's connection slots, or hold a
// connection past the hello timeout with a hello it cannot prove.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/peer/peer_handshake.h"
#include "daemon/peer/peer_receiver.h"
#include "daemon/peer/peer_sender.h"
#include "daemon/peer/peer_socket.h"
#include "tests/catch.h"
#include "tests/unit/daemon/peer/raw_peer.h"

namespace ckpt::peer {
namespace {

std::string NewSecret() {
  std::string secret(kSecretBytes, '\0');
  FillRandom(secret.data(), secret.size());
  return secret;
}

// The host in the middle: forwards each connection to the receiver,
// records what the sender sent, and may alter one byte of it on the way
// (`alter` gets the byte's position in the sender's stream).
class Tap {
 public:
  Tap(int receiver_port, std::function<void(uint64_t at, char* byte)> alter = nullptr)
      : receiver_port_(receiver_port), alter_(std::move(alter)) {
    absl::StatusOr<int> listener = ListenTcp("127.0.0.1:0", &port_);
    REQUIRE(listener.ok());
    listener_ = *listener;
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~Tap() {
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    ::close(listener_);
    for (std::thread& t : pumps_) t.join();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  // The first `n` bytes the sender sent, once they went by.
  std::string Seen(size_t n) ABSL_LOCKS_EXCLUDED(mu_) {
    auto enough = [this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return seen_.size() >= n; };
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&enough));
    return seen_.substr(0, n);
  }

 private:
  void Accept() {
    for (;;) {
      const int from = ::accept(listener_, nullptr, nullptr);
      if (from < 0) return;
      absl::StatusOr<int> to =
          ConnectTcp(absl::StrCat("127.0.0.1:", receiver_port_), absl::Seconds(5));
      REQUIRE(to.ok());
      pumps_.emplace_back([this, from, to = *to] {
        std::thread up([&] { Pump(from, to, true); });
        Pump(to, from, false);
        ::shutdown(from, SHUT_RDWR);  // the receiver is done: so is the sender's side
        up.join();
        ::close(from);
        ::close(to);
      });
    }
  }
  // Copies `in` to `out` until either end closes.
  void Pump(int in, int out, bool from_sender) {
    std::vector<char> buffer(1 << 16);
    uint64_t at = 0;
    for (;;) {
      const ssize_t n = ::recv(in, buffer.data(), buffer.size(), 0);
      if (n <= 0) break;
      if (from_sender) {
        for (ssize_t i = 0; alter_ && i < n; ++i) alter_(at + i, &buffer[i]);
        absl::MutexLock lock(&mu_);
        // Only the first connection's bytes: what an observer recorded.
        if (first_sender_ < 0) first_sender_ = in;
        if (first_sender_ == in) seen_.append(buffer.data(), n);
      }
      at += static_cast<uint64_t>(n);
      if (::send(out, buffer.data(), n, MSG_NOSIGNAL) != n) break;
    }
    ::shutdown(out, SHUT_WR);
  }

  const int receiver_port_;
  const std::function<void(uint64_t, char*)> alter_;
  int port_ = 0;
  int listener_ = -1;
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // the acceptor's only
  absl::Mutex mu_;
  std::string seen_ ABSL_GUARDED_BY(mu_);
  int first_sender_ ABSL_GUARDED_BY(mu_) = -1;
};

// The receiver's answer to a hello sent as is on a new connection: the
// first Ack (its code and flags), or the error reading it.
struct Answer {
  absl::Status read;
  absl::StatusCode code = absl::StatusCode::kOk;
  uint32_t flags = 0;
};
Answer Present(const PeerReceiver& receiver, const std::string& hello,
               absl::Duration wait = absl::Seconds(30)) {
  RawPeer raw(receiver);
  raw.Send(hello.data(), hello.size());
  std::array<char, kAckBytes> ack;
  Answer answer;
  answer.read = raw.Answer(&ack, wait);
  if (answer.read.ok()) {
    answer.code = static_cast<absl::StatusCode>(GetU32(ack.data() + 8));
    answer.flags = GetU32(ack.data() + 12);
  }
  return answer;
}

TEST_CASE("An observer of one transfer's hello can neither forge another of its load nor replay it",
          "[peer][attack]") {
  auto receiver = StartReceiver({.claim_timeout = absl::Seconds(60)});
  const std::string secret = NewSecret();  // the load's, sent to its hosts only
  constexpr uint64_t kLoad = 0x10ad;
  std::shared_ptr<void> open = receiver->OpenPrefix(kLoad, secret);
  const PeerToken first = TransferToken(kLoad, 1, 0, 1, secret);
  const PeerToken second = TransferToken(kLoad, 2, 0, 1, secret);
  std::vector<char> src = RandomBytes(1 << 16, 5), dst1(src.size(), 0), dst2(src.size(), 0);
  const PeerBlockRef block{0, src.data(), src.size()};
  auto one = receiver->Expect("group 1", dst1.data(), dst1.size(), first);
  auto two = receiver->Expect("group 2", dst2.data(), dst2.size(), second);

  // The first transfer goes through the observer.
  Tap tap(receiver->port());
  REQUIRE(PeerSend(tap.address(), first, {&block, 1}).ok());
  REQUIRE(one->Wait(absl::Now() + absl::Seconds(10)).ok());
  const std::string observed = tap.Seen(kHelloBytes);

  // Whatever the hello carried, with the other transfer's id (ids follow
  // a pattern: load, group, hosts).
  std::string forged = observed;
  forged.replace(16, kIdBytes, std::string(second.id()));
  const Answer forgery = Present(*receiver, forged);
  REQUIRE(forgery.read.ok());
  CHECK(forgery.code == absl::StatusCode::kPermissionDenied);
  CHECK((forgery.flags & kReady) == 0);
  CHECK(!two->connected());
  CHECK(receiver->Stats().hellos_rejected == 1);

  // The hello it saw, again: its transfer is done, and the hello used.
  const Answer replay = Present(*receiver, observed);
  REQUIRE(replay.read.ok());
  CHECK(replay.code == absl::StatusCode::kPermissionDenied);
  CHECK(receiver->Stats().hellos_rejected == 2);

  // The second transfer's real sender is untouched by all that.
  std::vector<char> other = RandomBytes(src.size(), 6);
  const PeerBlockRef real{0, other.data(), other.size()};
  REQUIRE(PeerSend(AddressOf(*receiver), second, {&real, 1}).ok());
  REQUIRE(two->Wait(absl::Now() + absl::Seconds(10)).ok());
  CHECK(dst2 == other);
}

TEST_CASE("A hello replayed while its sender waits for the transfer is refused at once",
          "[peer][attack]") {
  auto receiver = StartReceiver({.claim_timeout = absl::Seconds(600)});
  const std::string secret = NewSecret();
  constexpr uint64_t kLoad = 0x5afe;
  std::shared_ptr<void> open = receiver->OpenPrefix(kLoad, secret);
  const PeerToken token = TransferToken(kLoad, 3, 0, 1, secret);
  std::vector<char> src = RandomBytes(1 << 16, 7), dst(src.size(), 0);
  const PeerBlockRef block{0, src.data(), src.size()};
  // The sender is ahead of this host's reader: its hello waits (verified).
  Tap tap(receiver->port());
  absl::Status sent;
  std::thread sender([&] { sent = PeerSend(tap.address(), token, {&block, 1}); });
  const std::string observed = tap.Seen(kHelloBytes);
  // The tap has passed the real hello on once the receiver verified it;
  // only then is the copy a replay (not the first to arrive).
  const absl::Time verified_by = absl::Now() + absl::Seconds(30);
  while (receiver->Stats().hellos_verified == 0 && absl::Now() < verified_by) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  REQUIRE(receiver->Stats().hellos_verified == 1);
  // Before the transfer is expected the copy would wait too, and might
  // take it; it is refused instead, well before the claim timeout.
  const Answer replay = Present(*receiver, observed, absl::Seconds(30));
  REQUIRE(replay.read.ok());
  CHECK(replay.code == absl::StatusCode::kPermissionDenied);
  CHECK(receiver->Stats().hellos_rejected == 1);
  auto transfer = receiver->Expect("group 3", dst.data(), dst.size(), token);
  REQUIRE(transfer->Wait(absl::Now() + absl::Seconds(30)).ok());
  sender.join();
  CHECK(sent.ok());
  CHECK(dst == src);
}

TEST_CASE("A frame altered on the way fails its transfer, and its sender hears so",
          "[peer][attack]") {
  constexpr uint32_t kFrame = 1 << 16;
  auto receiver = StartReceiver({.max_frame_bytes = kFrame});
  std::vector<char> src = RandomBytes(2 * kFrame, 8), dst(src.size(), 0);
  const PeerBlockRef block{0, src.data(), src.size()};
  auto transfer = receiver->Expect("load Z group 4", dst.data(), dst.size());
  // The sender's stream: hello, then per frame its header, bytes and MAC.
  uint64_t target = 0;
  SECTION("a byte of the first frame's payload") { target = kHelloBytes + kFrameHeaderBytes + 100; }
  SECTION("a byte of the first frame's MAC") { target = kHelloBytes + kFrameHeaderBytes + kFrame; }
  SECTION("a byte of the second frame's length") {
    target = kHelloBytes + kFrameHeaderBytes + kFrame + kTagBytes + 8;
  }
  Tap tap(receiver->port(), [target](uint64_t at, char* byte) {
    if (at == target) *byte ^= 0x01;
  });
  const absl::Status sent =
      PeerSend(tap.address(), transfer->token(), {&block, 1}, {.max_frame_bytes = kFrame});
  INFO(sent.ToString());
  CHECK(!sent.ok());  // the owner on the sending side sees an error, not success
  const absl::Status s = transfer->Wait(absl::Now() + absl::Seconds(10));
  INFO(s.ToString());
  CHECK(!s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("load Z group 4"));
  // No byte past the frame that failed was taken.
  CHECK(transfer->received() < src.size());
  CHECK(std::all_of(dst.begin() + kFrame, dst.end(), [](char c) { return c == 0; }));
  CHECK(receiver->Stats().transfers_failed == 1);
}

TEST_CASE("A frame injected with a MAC its sender could not make fails the transfer",
          "[peer][attack]") {
  auto receiver = StartReceiver({});
  std::vector<char> dst(8, 0);
  auto transfer = receiver->Expect("load Y group 1", dst.data(), dst.size());
  RawPeer raw(*receiver);
  raw.Hello(transfer->token());
  REQUIRE(raw.frame_auth);
  // A correct header and bytes, then sixteen bytes that are no MAC.
  raw.Header(0, 8, kLastFrame);
  raw.Send("injected", 8);
  const Tag made_up{};
  raw.Send(made_up.data(), made_up.size());
  const absl::Status s = transfer->Wait(absl::Now() + absl::Seconds(10));
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(s.message()), Catch::Contains("load Y group 1"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("authentication"));
  CHECK(transfer->received() == 0);
}

TEST_CASE("Silent connections from one host do not take another host's slots", "[peer][attack]") {
  // Silent connections could hold a slot for the whole (long) hello
  // timeout; the real sender gives up far sooner.
  auto receiver = StartReceiver(
      {.hello_timeout = absl::Seconds(120), .max_connections = 64, .max_connections_per_host = 16});
  std::vector<std::unique_ptr<RawPeer>> silent;
  for (int i = 0; i < 80; ++i) silent.push_back(std::make_unique<RawPeer>(*receiver, "127.0.0.2"));
  std::vector<char> src = RandomBytes(1 << 20, 9), dst(src.size(), 0);
  auto transfer = receiver->Expect("load X group 2", dst.data(), dst.size());
  const PeerBlockRef block{0, src.data(), src.size()};
  const absl::Status sent = PeerSend(AddressOf(*receiver), transfer->token(), {&block, 1},
                                     {.claim_timeout = absl::Seconds(30)});
  INFO(sent.ToString());
  REQUIRE(sent.ok());
  REQUIRE(transfer->Wait(absl::Now() + absl::Seconds(10)).ok());
  CHECK(dst == src);
  // The silent host's connections past its share were closed at once.
  CHECK(receiver->Stats().connections_refused >= 80 - 16);
}

TEST_CASE("A hello naming an open load with a MAC it cannot make is refused at the hello",
          "[peer][attack]") {
  // A claim timeout far past the wait below: only a refusal at the hello
  // ends the connection in time.
  auto receiver =
      StartReceiver({.hello_timeout = absl::Seconds(1), .claim_timeout = absl::Seconds(600)});
  constexpr uint64_t kLoad = 0xbeef;
  std::shared_ptr<void> open = receiver->OpenPrefix(kLoad, NewSecret());
  // A token of the load (ids are no secret) with a key of the attacker's.
  PeerToken guess = TransferToken(kLoad, 5, 0, 1, "not the load's secret");
  Nonce nonce{};
  const std::array<char, kHelloBytes> hello = EncodeHello(guess, nonce);
  const Answer answer =
      Present(*receiver, std::string(hello.data(), hello.size()), absl::Seconds(60));
  INFO(answer.read.ToString());
  REQUIRE(answer.read.ok());
  CHECK(answer.code == absl::StatusCode::kPermissionDenied);
  CHECK(receiver->Stats().hellos_rejected == 1);
  CHECK(receiver->Stats().connections_refused == 1);
}

TEST_CASE("A sender of a load whose secret this host lacks yet is told to come back", "[peer]") {
  auto receiver = StartReceiver(
      {.hello_timeout = absl::Milliseconds(300), .claim_timeout = absl::Seconds(600)});
  constexpr uint64_t kLoad = 0xca11;
  const std::string secret = NewSecret();
  std::shared_ptr<void> blind = receiver->OpenPrefix(kLoad, "");  // no secret: no check possible
  const PeerToken token = TransferToken(kLoad, 6, 0, 1, secret);
  std::vector<char> src = RandomBytes(4096, 10), dst(src.size(), 0);
  // Raw: not held past its hello timeout, told to retry.
  Nonce nonce{};
  const std::array<char, kHelloBytes> hello = EncodeHello(token, nonce);
  const Answer answer = Present(*receiver, std::string(hello.data(), hello.size()));
  REQUIRE(answer.read.ok());
  CHECK(answer.code == absl::StatusCode::kUnavailable);
  CHECK((answer.flags & kRetry) != 0);
  // PeerSend comes back until the load's secret is given here.
  const PeerBlockRef block{0, src.data(), src.size()};
  absl::Status sent;
  std::thread sender([&] { sent = PeerSend(AddressOf(*receiver), token, {&block, 1}); });
  std::shared_ptr<void> keyed = receiver->OpenPrefix(kLoad, secret);
  auto transfer = receiver->Expect("group 6", dst.data(), dst.size(), token);
  REQUIRE(transfer->Wait(absl::Now() + absl::Seconds(30)).ok());
  sender.join();
  CHECK(sent.ok());
  CHECK(dst == src);
}

}  // namespace
}  // namespace ckpt::peer
