// The peer data channel's wire format (docs/design.md §5): daemons forward byte
// ranges to each other over plain TCP, which reached the link's bandwidth
// where a gRPC stream of the same bytes reached half of it
// (tools/bench/peer_bench.cc). The control plane (gRPC, authenticated)
// gives every host of a load or save one random master secret; each
// transfer has an id and a key of its own, HMAC(master, id)
// (peer_crypto.h). Keys never cross the data network: a host there that
// sees every byte of one transfer learns nothing that lets it send or
// alter another, or replay the one it saw.
//
//   sender -> receiver  Hello: "CKPTPEER", u32 version, u32 0, the transfer's
//                       id (16 bytes), the sender's nonce (16), and
//                       HMAC-SHA256(key, the 48 bytes before): the sender
//                       knows the key. The receiver checks it before it
//                       takes anything, within its hello timeout.
//   receiver -> sender  Ready (an Ack with flag kReady, and kFrameAuth when
//                       frames carry MACs), the receiver's nonce, and the
//                       GMAC of both under the session key (message 0 of
//                       the receiver); or a refusal (an Ack with an error
//                       code, kRetry when the sender should come back: the
//                       receiver cannot check the hello yet). A verified
//                       hello of an id the receiver will expect soon (its
//                       load's prefix is open) waits for it.
//   sender -> receiver  Frame header: u64 offset, u32 length, u32 flags; then
//                       `length` bytes for [offset, offset + length) of the
//                       transfer; then, with kFrameAuth, the GMAC of the
//                       header and bytes under the session key, frame n
//                       being the sender's message n: a frame altered,
//                       injected, replayed or reordered fails the transfer.
//                       Flag kLastFrame ends the transfer.
//   receiver -> sender  Ack: u64 bytes received, u32 status code, u32 0, and
//                       its GMAC (the receiver's message 1).
//
// The session key is HMAC(key, both nonces): nothing recorded from one
// connection is good on another. Integers are little-endian.
#ifndef CKPT_DAEMON_PEER_PEER_WIRE_H_
#define CKPT_DAEMON_PEER_PEER_WIRE_H_

#include <array>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "daemon/peer/peer_crypto.h"

namespace ckpt::peer {

inline constexpr char kMagic[8] = {'C', 'K', 'P', 'T', 'P', 'E', 'E', 'R'};
// 2: the receiver says Ready. 3: keys per transfer, a MAC'd hello, MAC'd
// frames and acks.
inline constexpr uint32_t kVersion = 3;
inline constexpr size_t kIdBytes = 16;
// A load's or save's master secret, as the control plane sends it.
inline constexpr size_t kSecretBytes = 16;
// The control plane's plans still describe a transfer as an id and a
// secret of equal size (kTokenBytes / 2 each): their checks use it.
inline constexpr size_t kTokenBytes = kIdBytes + kSecretBytes;
inline constexpr size_t kHelloBytes = 8 + 4 + 4 + kIdBytes + kNonceBytes + kHelloMacBytes;
inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr size_t kAckBytes = 16;
inline constexpr size_t kReadyBytes = kAckBytes + kNonceBytes + kTagBytes;
inline constexpr size_t kSignedAckBytes = kAckBytes + kTagBytes;
inline constexpr uint32_t kLastFrame = 1;
// In an Ack's last word.
inline constexpr uint32_t kReady = 1;
inline constexpr uint32_t kFrameAuth = 2;  // with kReady: every frame carries its MAC
inline constexpr uint32_t kRetry = 4;      // with a refusal: come back with a new hello
// A transfer's id begins with the id of the load it belongs to (its prefix).
inline constexpr size_t kTokenPrefixBytes = 8;

// A transfer's credential, never sent as is: its id (sent) and its key
// (proved, in the hello's MAC).
struct PeerToken {
  std::array<uint8_t, kIdBytes> id_bytes{};
  Key key{};
  absl::string_view id() const { return View(id_bytes); }
};

inline void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
inline void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
inline uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
inline uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

// The token of one transfer of a load (its group) or of a save's replicas
// (its piece): the id is the load's or save's id, the sequence number, the
// sender's and receiver's indexes among the hosts; the key is derived from
// the load's or save's master secret.
inline PeerToken TransferToken(uint64_t id, uint32_t sequence, uint16_t sender, uint16_t receiver,
                               absl::string_view master_secret) {
  PeerToken token;
  char* p = reinterpret_cast<char*>(token.id_bytes.data());
  PutU64(p, id);
  PutU32(p + 8, sequence);
  p[12] = static_cast<char>(sender);
  p[13] = static_cast<char>(sender >> 8);
  p[14] = static_cast<char>(receiver);
  p[15] = static_cast<char>(receiver >> 8);
  token.key = TransferKey(master_secret, token.id());
  return token;
}

}  // namespace ckpt::peer

#endif  // CKPT_DAEMON_PEER_PEER_WIRE_H_
