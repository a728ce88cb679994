// The sending end of the peer data channel (peer_wire.h): one transfer's
// byte ranges, straight from memory (a pool room) to the socket, a frame
// header and the bytes in one sendmsg each.
#ifndef CKPT_DAEMON_PEER_PEER_SENDER_H_
#define CKPT_DAEMON_PEER_PEER_SENDER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/peer/peer_wire.h"

namespace ckpt::peer {

struct PeerBlockRef {
  uint64_t offset = 0;  // within the transfer
  const char* data = nullptr;
  uint64_t length = 0;
};

struct PeerSendOptions {
  uint32_t max_frame_bytes = 64u << 20;  // larger blocks go in several frames
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration idle_timeout = absl::Seconds(10);  // the receiver took nothing for this long
  // How long the receiver may take to expect the transfer (its load's
  // readers may be behind this host's).
  absl::Duration claim_timeout = absl::Seconds(120);
  // Asked now and then while the receiver has not taken the transfer:
  // true gives up (CANCELLED), e.g. once the sending load failed.
  std::function<bool()> cancelled;
};

// Sends `blocks` (in any order; none may overlap) as the transfer `token` names to the receiver at
// `address` ("host:port"), and waits for its acknowledgement. The status
// names the receiver; the receiver's own error code comes back as this
// status's code (its message stays on the receiving host).
absl::Status PeerSend(const std::string& address, const PeerToken& token,
                      absl::Span<const PeerBlockRef> blocks, const PeerSendOptions& options = {});

}  // namespace ckpt::peer

#endif  // CKPT_DAEMON_PEER_PEER_SENDER_H_
