// The peer channel's messages that are not frames (peer_wire.h), built and
// checked in one place for both ends and for tests that play one end.
//
// Thread-safety: pure functions; a FrameMac passed in is the caller's.
#ifndef CKPT_DAEMON_PEER_PEER_HANDSHAKE_H_
#define CKPT_DAEMON_PEER_PEER_HANDSHAKE_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "daemon/peer/peer_crypto.h"
#include "daemon/peer/peer_wire.h"

namespace ckpt::peer {

// The receiver's messages, by number (the IVs of their MACs).
inline constexpr uint64_t kReadyMessage = 0;
inline constexpr uint64_t kAckMessage = 1;

// A hello for `token`'s transfer with the sender's `nonce`.
std::array<char, kHelloBytes> EncodeHello(const PeerToken& token, const Nonce& nonce);

struct HelloFields {
  std::string id;  // kIdBytes
  Nonce nonce{};
};
// The hello's id and nonce; an error when it is not a ckpt peer's hello of
// this version (nothing about its MAC: see HelloVerifies).
absl::Status ParseHello(const char* hello, HelloFields* fields);
// Whether the hello's MAC is the one `key` gives (constant time).
bool HelloVerifies(const char* hello, const Key& key);

// Ready: flags (kReady, and kFrameAuth or not), the receiver's nonce, the
// MAC under the session.
std::array<char, kReadyBytes> EncodeReady(FrameMac& session, uint32_t flags,
                                          const Nonce& receiver_nonce);
bool ReadyVerifies(FrameMac& session, const char* ready);
// The end of a transfer the receiver took: bytes received, its status.
std::array<char, kSignedAckBytes> EncodeAck(FrameMac& session, uint64_t received,
                                            absl::StatusCode code);
bool AckVerifies(FrameMac& session, const char* ack);

// A plain Ack: a refusal before any key is known (carries no MAC).
std::array<char, kAckBytes> PlainAck(uint64_t received, absl::StatusCode code, uint32_t flags);

}  // namespace ckpt::peer

#endif  // CKPT_DAEMON_PEER_PEER_HANDSHAKE_H_
