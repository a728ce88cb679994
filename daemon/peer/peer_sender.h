// The sending end of the peer data channel (peer_wire.h): one transfer's
// byte ranges, straight from memory (a pool room) to the socket, a frame
// header and the bytes in one sendmsg each; or from a file with sendfile.
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
  // When file >= 0 the bytes are `file`'s from file_offset on (data is then
  // unused): sent with sendfile, the kernel taking the pages where they lie
  // (a memory-tier file) instead of a copy out of this process.
  int file = -1;
  uint64_t file_offset = 0;
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
  std::function<bool()> cancelled = nullptr;
};

// Sends `blocks` (in any order; none may overlap) as the transfer `token` names to the receiver at
// `address` ("host:port"), and waits for its acknowledgement. The status
// names the receiver; the receiver's own error code comes back as this
// status's code (its message stays on the receiving host).
absl::Status PeerSend(const std::string& address, const PeerToken& token,
                      absl::Span<const PeerBlockRef> blocks, const PeerSendOptions& options = {});

}  // namespace ckpt::peer

#endif  // CKPT_DAEMON_PEER_PEER_SENDER_H_
