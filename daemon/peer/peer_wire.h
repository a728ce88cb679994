// The peer data channel's wire format (DESIGN.md §5): daemons forward byte
// ranges to each other over plain TCP, which reached the link's bandwidth
// where a gRPC stream of the same bytes reached half of it
// (tools/bench/peer_bench.cc). The control plane (gRPC, authenticated)
// hands the sending host a one-use token for each transfer; the channel
// accepts a connection only with a token the receiver is expecting.
//
//   sender -> receiver  Hello: "CKPTPEER", u32 version, u32 0, token (32 bytes)
//   receiver -> sender  Ready (an Ack with flag kReady): the token is expected
//                       and the transfer is the sender's; or a refusal (an
//                       Ack with an error code). A token the receiver will
//                       expect soon (its load's id is open) is waited for.
//   sender -> receiver  Frame header: u64 offset, u32 length, u32 flags; then
//                       `length` bytes for [offset, offset + length) of the
//                       transfer. Flag kLastFrame ends the transfer.
//   receiver -> sender  Ack: u64 bytes received, u32 status code, u32 0
//
// Integers are little-endian. The bytes carry no checksum of their own:
// they are parts of stored chunks, whose CRC32C the receiving host checks.
#ifndef CKPT_DAEMON_PEER_PEER_WIRE_H_
#define CKPT_DAEMON_PEER_PEER_WIRE_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"

namespace ckpt::peer {

inline constexpr char kMagic[8] = {'C', 'K', 'P', 'T', 'P', 'E', 'E', 'R'};
inline constexpr uint32_t kVersion = 2;  // 2: the receiver says Ready
inline constexpr size_t kTokenBytes = 32;
inline constexpr size_t kHelloBytes = 8 + 4 + 4 + kTokenBytes;
inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr size_t kAckBytes = 16;
inline constexpr uint32_t kLastFrame = 1;
inline constexpr uint32_t kReady = 1;  // in an Ack's last word
// A token's id begins with the id of the load it belongs to (its prefix).
inline constexpr size_t kTokenPrefixBytes = 8;

// A transfer's credential: the first half names it, the second proves the
// sender was given it (compared in constant time).
struct PeerToken {
  std::array<uint8_t, kTokenBytes> bytes{};
  absl::string_view id() const {
    return absl::string_view(reinterpret_cast<const char*>(bytes.data()), kTokenBytes / 2);
  }
  absl::string_view secret() const {
    return absl::string_view(reinterpret_cast<const char*>(bytes.data()) + kTokenBytes / 2,
                             kTokenBytes / 2);
  }
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
// (its piece): the load's or save's id, the sequence number, the sender's
// and receiver's indexes among the hosts, then the 16-byte secret.
inline PeerToken TransferToken(uint64_t id, uint32_t sequence, uint16_t sender, uint16_t receiver,
                               absl::string_view secret) {
  PeerToken token;
  char* p = reinterpret_cast<char*>(token.bytes.data());
  PutU64(p, id);
  PutU32(p + 8, sequence);
  p[12] = static_cast<char>(sender);
  p[13] = static_cast<char>(sender >> 8);
  p[14] = static_cast<char>(receiver);
  p[15] = static_cast<char>(receiver >> 8);
  std::memcpy(p + 16, secret.data(), std::min(secret.size(), kTokenBytes / 2));
  return token;
}

}  // namespace ckpt::peer

#endif  // CKPT_DAEMON_PEER_PEER_WIRE_H_
