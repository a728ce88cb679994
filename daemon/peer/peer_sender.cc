#include "daemon/peer/peer_sender.h"

#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/peer/peer_socket.h"
#include "proto/lib/status_context.h"

namespace ckpt::peer {

absl::Status PeerSend(const std::string& address, const PeerToken& token,
                      absl::Span<const PeerBlockRef> blocks, const PeerSendOptions& options) {
  if (options.max_frame_bytes == 0) return absl::InvalidArgumentError("peer send: no frame size");
  // The receiver takes frames in order, none overlapping.
  std::vector<PeerBlockRef> sorted(blocks.begin(), blocks.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const PeerBlockRef& a, const PeerBlockRef& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].offset - sorted[i - 1].offset < sorted[i - 1].length) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer send: blocks at offsets ", sorted[i - 1].offset, " (",
                       sorted[i - 1].length, " bytes) and ", sorted[i].offset, " overlap"));
    }
  }
  blocks = sorted;
  const std::string peer = absl::StrCat("peer ", address);
  const absl::Time claim_end = absl::Now() + options.claim_timeout;
  // A receiver with every connection slot taken (strangers' hellos hold
  // theirs a while) closes a new connection unanswered: tried again, with
  // a growing pause, until the claim deadline. A refusal is final.
  absl::Duration pause = absl::Milliseconds(20);
  for (;;) {
    absl::StatusOr<int> fd = ConnectTcp(address, options.connect_timeout);
    if (!fd.ok()) return fd.status();
    SetTimeouts(*fd, options.idle_timeout, options.idle_timeout);
    absl::StatusCode refused = absl::StatusCode::kOk;  // the receiver's answer to the hello
    bool unanswered = false;                           // closed before any answer to the hello
    bool own_fault = false;  // this end could not go on (its file could not give the bytes)
    auto send = [&]() -> absl::Status {
      char hello[kHelloBytes] = {};
      std::memcpy(hello, kMagic, sizeof kMagic);
      PutU32(hello + 8, kVersion);
      std::memcpy(hello + 16, token.bytes.data(), kTokenBytes);
      iovec hello_iov{hello, sizeof hello};
      if (absl::Status s = WriteFull(*fd, &hello_iov, 1, peer); !s.ok()) return s;
      // Nothing more until the receiver took the transfer (or refused it).
      for (pollfd answer{*fd, POLLIN, 0}; absl::Now() < claim_end;) {
        const int rc = ::poll(&answer, 1, 200);
        if (rc > 0 || (rc < 0 && errno != EINTR)) break;  // ReadFull says which
        if (options.cancelled && options.cancelled()) {
          return absl::CancelledError(
              absl::StrCat("gave up waiting for ", peer, " to take the transfer"));
        }
      }
      SetTimeouts(*fd, options.claim_timeout, options.idle_timeout);
      char ready[kAckBytes];
      if (absl::Status s = ReadFull(*fd, ready, sizeof ready, peer, claim_end); !s.ok()) {
        unanswered = true;
        return WithContext(s, "waiting for the receiver to take the transfer");
      }
      SetTimeouts(*fd, options.idle_timeout, options.idle_timeout);
      if (const auto code = static_cast<absl::StatusCode>(GetU32(ready + 8));
          code != absl::StatusCode::kOk || GetU32(ready + 12) != kReady) {
        refused = code == absl::StatusCode::kOk ? absl::StatusCode::kInternal : code;
        return absl::OkStatus();
      }
      uint64_t sent = 0;
      // Every block in frames of at most max_frame_bytes; the last frame of
      // the last block carries the end (an empty one when there are none).
      size_t frames_left = 0;
      for (const PeerBlockRef& b : blocks) {
        frames_left += std::max<uint64_t>(
            1, (b.length + options.max_frame_bytes - 1) / options.max_frame_bytes);
      }
      if (frames_left == 0) frames_left = 1;
      // A frame of `length` bytes at `offset` of the transfer, from `block`
      // at `within`.
      auto frame = [&](uint64_t offset, const PeerBlockRef* block, uint64_t within,
                       uint32_t length) -> absl::Status {
        char header[kFrameHeaderBytes];
        PutU64(header, offset);
        PutU32(header + 8, length);
        PutU32(header + 12, --frames_left == 0 ? kLastFrame : 0);
        sent += length;
        if (length > 0 && block->file >= 0) {
          iovec iov{header, sizeof header};
          if (absl::Status s = WriteFull(*fd, &iov, 1, peer); !s.ok()) return s;
          absl::Status s =
              SendFileFull(*fd, block->file, block->file_offset + within, length, peer);
          own_fault = absl::IsDataLoss(s);
          return s;
        }
        iovec iov[2] = {{header, sizeof header},
                        {const_cast<char*>(length > 0 ? block->data + within : nullptr), length}};
        return WriteFull(*fd, iov, length > 0 ? 2 : 1, peer);
      };
      if (blocks.empty()) return frame(0, nullptr, 0, 0);
      for (const PeerBlockRef& b : blocks) {
        uint64_t done = 0;
        do {
          const uint32_t n =
              static_cast<uint32_t>(std::min<uint64_t>(b.length - done, options.max_frame_bytes));
          if (absl::Status s = frame(b.offset + done, &b, done, n); !s.ok()) return s;
          done += n;
        } while (done < b.length);
      }
      return absl::OkStatus();
    };
    absl::Status status = send();
    if (unanswered && absl::Now() + pause < claim_end &&
        !(options.cancelled && options.cancelled())) {
      ::close(*fd);
      absl::SleepFor(pause);
      pause = std::min(pause * 2, absl::Seconds(1));
      continue;
    }
    if (own_fault) {
      // The receiver would only wait out its idle timeout for the rest:
      // closing tells it at once.
      ::close(*fd);
      return status;
    }
    if (refused != absl::StatusCode::kOk) {
      ::close(*fd);
      return absl::Status(
          refused, absl::StrCat(peer, " refused the transfer (", absl::StatusCodeToString(refused),
                                "; its log says why)"));
    }
    // The acknowledgement, also after a failed send: the receiver may have
    // said why it stopped reading.
    char ack[kAckBytes];
    const absl::Status acked = ReadFull(*fd, ack, sizeof ack, peer);
    ::close(*fd);
    if (acked.ok()) {
      const auto code = static_cast<absl::StatusCode>(GetU32(ack + 8));
      if (code != absl::StatusCode::kOk) {
        return absl::Status(
            code, absl::StrCat(peer, " refused the transfer after ", GetU64(ack), " bytes (",
                               absl::StatusCodeToString(code), "; its log says why)"));
      }
      if (status.ok()) return absl::OkStatus();
    }
    return status.ok() ? WithContext(acked, "waiting for the acknowledgement") : status;
  }
}

}  // namespace ckpt::peer
