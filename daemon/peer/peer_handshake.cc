#include "daemon/peer/peer_handshake.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ckpt::peer {
namespace {

constexpr size_t kSignedHelloBytes = kHelloBytes - kHelloMacBytes;
constexpr char kHelloLabel[] = "ckpt-peer v3 hello";

}  // namespace

std::array<char, kHelloBytes> EncodeHello(const PeerToken& token, const Nonce& nonce) {
  std::array<char, kHelloBytes> hello{};
  char* p = hello.data();
  std::memcpy(p, kMagic, sizeof kMagic);
  PutU32(p + 8, kVersion);
  std::memcpy(p + 16, token.id_bytes.data(), kIdBytes);
  std::memcpy(p + 16 + kIdBytes, nonce.data(), kNonceBytes);
  const Key mac = Hmac(View(token.key), kHelloLabel, View(p, kSignedHelloBytes));
  std::memcpy(p + kSignedHelloBytes, mac.data(), kHelloMacBytes);
  return hello;
}

absl::Status ParseHello(const char* hello, HelloFields* fields) {
  if (std::memcmp(hello, kMagic, sizeof kMagic) != 0) {
    return absl::InvalidArgumentError("not a ckpt peer's hello");
  }
  if (GetU32(hello + 8) != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("a hello of version ", GetU32(hello + 8), "; this is ", kVersion));
  }
  fields->id.assign(hello + 16, kIdBytes);
  std::memcpy(fields->nonce.data(), hello + 16 + kIdBytes, kNonceBytes);
  return absl::OkStatus();
}

bool HelloVerifies(const char* hello, const Key& key) {
  const Key mac = Hmac(View(key), kHelloLabel, View(hello, kSignedHelloBytes));
  return ConstantTimeEquals(View(mac), View(hello + kSignedHelloBytes, kHelloMacBytes));
}

std::array<char, kAckBytes> PlainAck(uint64_t received, absl::StatusCode code, uint32_t flags) {
  std::array<char, kAckBytes> ack{};
  PutU64(ack.data(), received);
  PutU32(ack.data() + 8, static_cast<uint32_t>(code));
  PutU32(ack.data() + 12, flags);
  return ack;
}

std::array<char, kReadyBytes> EncodeReady(FrameMac& session, uint32_t flags,
                                          const Nonce& receiver_nonce) {
  std::array<char, kReadyBytes> ready{};
  const std::array<char, kAckBytes> ack = PlainAck(0, absl::StatusCode::kOk, flags);
  std::memcpy(ready.data(), ack.data(), kAckBytes);
  std::memcpy(ready.data() + kAckBytes, receiver_nonce.data(), kNonceBytes);
  const Tag tag =
      session.Of(Direction::kReceiver, kReadyMessage, View(ready.data(), kAckBytes + kNonceBytes));
  std::memcpy(ready.data() + kAckBytes + kNonceBytes, tag.data(), kTagBytes);
  return ready;
}

bool ReadyVerifies(FrameMac& session, const char* ready) {
  const Tag tag =
      session.Of(Direction::kReceiver, kReadyMessage, View(ready, kAckBytes + kNonceBytes));
  return ConstantTimeEquals(View(tag), View(ready + kAckBytes + kNonceBytes, kTagBytes));
}

std::array<char, kSignedAckBytes> EncodeAck(FrameMac& session, uint64_t received,
                                            absl::StatusCode code) {
  std::array<char, kSignedAckBytes> signed_ack{};
  const std::array<char, kAckBytes> ack = PlainAck(received, code, 0);
  std::memcpy(signed_ack.data(), ack.data(), kAckBytes);
  const Tag tag = session.Of(Direction::kReceiver, kAckMessage, View(ack.data(), kAckBytes));
  std::memcpy(signed_ack.data() + kAckBytes, tag.data(), kTagBytes);
  return signed_ack;
}

bool AckVerifies(FrameMac& session, const char* ack) {
  const Tag tag = session.Of(Direction::kReceiver, kAckMessage, View(ack, kAckBytes));
  return ConstantTimeEquals(View(tag), View(ack + kAckBytes, kTagBytes));
}

}  // namespace ckpt::peer
