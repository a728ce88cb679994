#include "daemon/peer/peer_sender.h"

#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/peer/peer_crypto.h"
#include "daemon/peer/peer_handshake.h"
#include "daemon/peer/peer_socket.h"
#include "proto/lib/status_context.h"

namespace ckpt::peer {
namespace {

// Bytes of a frame MAC'd and sent at a time: within the cache from the
// MAC to the socket's copy, and few syscalls per byte (64 KiB pieces cost
// a third of the throughput in ckpt-peer-bench).
constexpr uint64_t kAuthChunkBytes = 1 << 20;

// [offset, offset + n) of `file`: DATA_LOSS when it cannot give them.
absl::Status ReadFileAt(int file, uint64_t offset, char* p, uint64_t n, const std::string& peer) {
  while (n > 0) {
    const ssize_t k = ::pread(file, p, n, static_cast<off_t>(offset));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      return absl::DataLossError(
          absl::StrCat("reading a file for ", peer, ": ", ErrnoMessage(errno)));
    }
    if (k == 0) {
      return absl::DataLossError(
          absl::StrCat("reading a file for ", peer, ": it ends ", n, " bytes early"));
    }
    p += k;
    offset += static_cast<uint64_t>(k);
    n -= static_cast<uint64_t>(k);
  }
  return absl::OkStatus();
}

}  // namespace

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
    bool forged = false;     // the Ready or the Ack failed its MAC: not the receiver planned
    std::unique_ptr<FrameMac> session;
    auto send = [&]() -> absl::Status {
      Nonce nonce;
      FillRandom(nonce.data(), nonce.size());
      std::array<char, kHelloBytes> hello = EncodeHello(token, nonce);
      iovec hello_iov{hello.data(), hello.size()};
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
      char ready[kReadyBytes];
      if (absl::Status s = ReadFull(*fd, ready, kAckBytes, peer, claim_end); !s.ok()) {
        unanswered = true;
        return WithContext(s, "waiting for the receiver to take the transfer");
      }
      SetTimeouts(*fd, options.idle_timeout, options.idle_timeout);
      const auto code = static_cast<absl::StatusCode>(GetU32(ready + 8));
      const uint32_t flags = GetU32(ready + 12);
      if (code == absl::StatusCode::kUnavailable && (flags & kRetry) != 0) {
        unanswered = true;  // it cannot check this hello yet: a new one, later
        return absl::UnavailableError(
            absl::StrCat(peer, " could not check the transfer's credential in time"));
      }
      if (code != absl::StatusCode::kOk || (flags & kReady) == 0) {
        refused = code == absl::StatusCode::kOk ? absl::StatusCode::kInternal : code;
        return absl::OkStatus();
      }
      if (absl::Status s = ReadFull(*fd, ready + kAckBytes, kReadyBytes - kAckBytes, peer);
          !s.ok()) {
        return WithContext(s, "reading the receiver's Ready");
      }
      Nonce theirs;
      std::memcpy(theirs.data(), ready + kAckBytes, kNonceBytes);
      session = std::make_unique<FrameMac>(SessionKey(token.key, nonce, theirs));
      if (!ReadyVerifies(*session, ready)) {
        forged = true;
        return absl::PermissionDeniedError(absl::StrCat(
            peer, " answered with a Ready that fails authentication: not the planned receiver"));
      }
      const bool frame_auth = (flags & kFrameAuth) != 0;
      std::unique_ptr<char[]> file_buffer;  // a file's bytes on their way, when MAC'd
      uint64_t frame_number = 0;
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
        if (!frame_auth) {
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
        }
        // MAC'd a piece at a time, each sent while still in the cache; the
        // header goes with the first piece, the tag with the last.
        session->Begin(Direction::kSender, frame_number++);
        session->Add(header, sizeof header);
        Tag tag;
        uint64_t done = 0;
        do {
          const uint64_t n = std::min<uint64_t>(kAuthChunkBytes, length - done);
          const char* piece = nullptr;
          if (n > 0 && block->file >= 0) {
            if (file_buffer == nullptr) file_buffer.reset(new char[kAuthChunkBytes]);
            absl::Status s = ReadFileAt(block->file, block->file_offset + within + done,
                                        file_buffer.get(), n, peer);
            own_fault = !s.ok();
            if (!s.ok()) return s;
            piece = file_buffer.get();
          } else if (n > 0) {
            piece = block->data + within + done;
          }
          if (n > 0) session->Add(piece, n);
          const bool first = done == 0, last = done + n == length;
          if (last) tag = session->Finish();
          iovec iov[3];
          int count = 0;
          if (first) iov[count++] = {header, sizeof header};
          if (n > 0) iov[count++] = {const_cast<char*>(piece), n};
          if (last) iov[count++] = {tag.data(), tag.size()};
          if (absl::Status s = WriteFull(*fd, iov, count, peer); !s.ok()) return s;
          done += n;
        } while (done < length);
        return absl::OkStatus();
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
    if (own_fault || forged || (session == nullptr && refused == absl::StatusCode::kOk)) {
      // The receiver would only wait out its idle timeout for the rest:
      // closing tells it at once. (Without a session, nothing was taken.)
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
    char ack[kSignedAckBytes];
    const absl::Status acked = ReadFull(*fd, ack, sizeof ack, peer);
    ::close(*fd);
    if (acked.ok()) {
      if (!AckVerifies(*session, ack)) {
        return absl::PermissionDeniedError(absl::StrCat(
            peer, " acknowledged with a MAC that fails: not the receiver that took the transfer"));
      }
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
