// The peer data channel's cryptography (peer_wire.h has the protocol):
// per-transfer keys derived from a load's or save's master secret, the
// hello's MAC, a connection's session key, and the MAC of every frame.
//
// Frames are authenticated with GMAC (AES-256-GCM over associated data
// only, OpenSSL): with AES-NI and carry-less multiply it runs at about
// 10 GB/s on one core, where HMAC-SHA256 runs at 1-2 GB/s, slower than the
// link. The bytes themselves are not encrypted: checkpoints are not
// secret from the data network's hosts, but must not be altered by them.
//
// Thread-safety: the functions are pure; a FrameMac is one connection's,
// used by one thread.
#ifndef CKPT_DAEMON_PEER_PEER_CRYPTO_H_
#define CKPT_DAEMON_PEER_PEER_CRYPTO_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "proto/lib/constant_time.h"
#include "proto/lib/secure_random.h"

namespace ckpt::peer {

inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kHelloMacBytes = 32;  // HMAC-SHA256
inline constexpr size_t kTagBytes = 16;       // GMAC

using Key = std::array<uint8_t, kKeyBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Tag = std::array<uint8_t, kTagBytes>;

// HMAC-SHA256(key, label || data): every key and MAC below is one, each
// under a label of its own so that none can stand for another.
Key Hmac(absl::string_view key, absl::string_view label, absl::string_view data);

// One transfer's key: HMAC of its id under the master secret the control
// plane gave every host of the load or save. Knowing one transfer's key
// tells nothing of another's, and the key never crosses the data network.
Key TransferKey(absl::string_view master_secret, absl::string_view transfer_id);
// A connection's key: the transfer's key mixed with the nonces both ends
// chose, so that nothing recorded from one connection is good on another.
Key SessionKey(const Key& transfer_key, const Nonce& sender, const Nonce& receiver);

// Who says a message: its MACs use IVs of their own.
enum class Direction : uint32_t { kSender = 0, kReceiver = 1 };

// GMAC under one session key, a message at a time: Begin with the
// message's number (each direction counts from 0, and a number is never
// used twice), Add its bytes in as many pieces as needed, then Finish.
class FrameMac {
 public:
  explicit FrameMac(const Key& session_key);
  ~FrameMac();
  FrameMac(const FrameMac&) = delete;
  FrameMac& operator=(const FrameMac&) = delete;

  void Begin(Direction direction, uint64_t counter);
  void Add(const void* data, size_t n);
  Tag Finish();
  // The tag of one message in one piece.
  Tag Of(Direction direction, uint64_t counter, absl::string_view message);

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

inline absl::string_view View(const void* p, size_t n) {
  return absl::string_view(static_cast<const char*>(p), n);
}
template <size_t N>
absl::string_view View(const std::array<uint8_t, N>& a) {
  return View(a.data(), N);
}

}  // namespace ckpt::peer

#endif  // CKPT_DAEMON_PEER_PEER_CRYPTO_H_
