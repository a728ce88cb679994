// A raw connection to a PeerReceiver, for what PeerSend never sends: it
// plays the sender's side of the protocol by hand (peer_handshake.h), from
// a local address of the test's choosing.
#ifndef CKPT_TESTS_UNIT_DAEMON_PEER_RAW_PEER_H_
#define CKPT_TESTS_UNIT_DAEMON_PEER_RAW_PEER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/peer/peer_crypto.h"
#include "daemon/peer/peer_handshake.h"
#include "daemon/peer/peer_receiver.h"
#include "daemon/peer/peer_socket.h"
#include "daemon/peer/peer_wire.h"
#include "tests/catch.h"

namespace ckpt::peer {

inline std::string AddressOf(const PeerReceiver& r) { return absl::StrCat("127.0.0.1:", r.port()); }

// A receiver on 127.0.0.1, any port.
inline std::unique_ptr<PeerReceiver> StartReceiver(PeerReceiverOptions options = {}) {
  options.listen_address = "127.0.0.1:0";
  auto receiver = PeerReceiver::Start(options);
  INFO(receiver.status().ToString());
  REQUIRE(receiver.ok());
  return *std::move(receiver);
}

// `n` bytes that differ by `seed`.
inline std::vector<char> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(gen());
  return v;
}

// A TCP connection to 127.0.0.1:port from `from` (a loopback address).
inline int ConnectFrom(const std::string& from, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  REQUIRE(::inet_pton(AF_INET, from.c_str(), &local.sin_addr) == 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) == 0);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) == 0);
  return fd;
}

struct RawPeer {
  explicit RawPeer(const PeerReceiver& r, const std::string& from = "127.0.0.1")
      : fd(ConnectFrom(from, r.port())) {}
  ~RawPeer() { ::close(fd); }
  void Send(const void* p, size_t n) { REQUIRE(::send(fd, p, n, MSG_NOSIGNAL) == ssize_t(n)); }
  // The first kAckBytes of the receiver's answer (bounded by `wait`).
  absl::Status Answer(std::array<char, kAckBytes>* ack, absl::Duration wait = absl::Seconds(30)) {
    SetTimeouts(fd, wait, wait);
    return ReadFull(fd, ack->data(), ack->size(), "the receiver");
  }
  // A hello for `token` as a sender knowing its key says it; the Ready it
  // must get back sets up the session its frames are MAC'd under.
  void Hello(const PeerToken& token) {
    FillRandom(nonce.data(), nonce.size());
    const std::array<char, kHelloBytes> hello = EncodeHello(token, nonce);
    Send(hello.data(), hello.size());
    char ready[kReadyBytes];
    SetTimeouts(fd, absl::Seconds(30), absl::Seconds(30));
    REQUIRE(ReadFull(fd, ready, sizeof ready, "the receiver").ok());
    REQUIRE((GetU32(ready + 12) & kReady) != 0);
    Nonce theirs;
    std::memcpy(theirs.data(), ready + kAckBytes, kNonceBytes);
    session = std::make_unique<FrameMac>(SessionKey(token.key, nonce, theirs));
    REQUIRE(ReadyVerifies(*session, ready));
    frame_auth = (GetU32(ready + 12) & kFrameAuth) != 0;
  }
  // A frame header alone (its bytes, if any, sent by the caller: a frame
  // broken off).
  void Header(uint64_t offset, uint32_t length, uint32_t flags) {
    char header[kFrameHeaderBytes];
    PutU64(header, offset);
    PutU32(header + 8, length);
    PutU32(header + 12, flags);
    Send(header, sizeof header);
  }
  // A whole frame as the sender would send it, its MAC included.
  void Frame(uint64_t offset, const std::string& bytes, uint32_t flags) {
    char header[kFrameHeaderBytes];
    PutU64(header, offset);
    PutU32(header + 8, static_cast<uint32_t>(bytes.size()));
    PutU32(header + 12, flags);
    Send(header, sizeof header);
    Send(bytes.data(), bytes.size());
    if (!frame_auth) return;
    session->Begin(Direction::kSender, frames++);
    session->Add(header, sizeof header);
    session->Add(bytes.data(), bytes.size());
    const Tag tag = session->Finish();
    Send(tag.data(), tag.size());
  }
  int fd = -1;
  Nonce nonce{};
  std::unique_ptr<FrameMac> session;
  bool frame_auth = false;
  uint64_t frames = 0;
};

}  // namespace ckpt::peer

#endif  // CKPT_TESTS_UNIT_DAEMON_PEER_RAW_PEER_H_
