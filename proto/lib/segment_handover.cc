#include "proto/lib/segment_handover.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"

namespace ckpt::segments {
namespace {

constexpr size_t kMaxMessageBytes =
    sizeof(WireHeader) + std::max(kMaxSegmentsPerMessage * sizeof(WireSegment), kMaxErrorBytes);

timeval SocketTimeout(absl::Duration d) {
  const absl::Duration clamped = std::max(d, absl::Milliseconds(1));
  return absl::ToTimeval(clamped);
}

absl::Status SendMessage(int socket, const void* data, size_t bytes, const int* fds, size_t nfds) {
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxSegmentsPerMessage * sizeof(int))];
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), fds, nfds * sizeof(int));
  }
  for (;;) {
    const ssize_t sent = sendmsg(socket, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(bytes)) return absl::OkStatus();
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) return ErrnoStatus(errno, "segment socket: send");
    return absl::InternalError("segment socket: short send");
  }
}

// Takes the descriptors out of a received message; *count is how many.
void TakeDescriptors(msghdr& msg, std::vector<UniqueFd>* out) {
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      out->emplace_back(fd);
    }
  }
}

}  // namespace

void UniqueFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::StatusOr<SegmentTable> FetchSegmentTable(const std::string& socket_path,
                                               const std::string& session, uint64_t pool_bytes,
                                               absl::Duration timeout) {
  const std::string where = absl::StrCat("segment socket ", socket_path);
  if (session.empty() || session.size() > kMaxSessionIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": bad session id"));
  }
  sockaddr_un address{};
  if (socket_path.empty() || socket_path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": path empty or too long"));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, socket_path.data(), socket_path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoStatus(errno, absl::StrCat(where, ": socket"));
  const timeval tv = SocketTimeout(timeout);
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const absl::Status s = ErrnoStatus(errno, absl::StrCat("cannot connect to ", where));
    return absl::UnavailableError(s.message());
  }
  if (send(fd.get(), session.data(), session.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(session.size())) {
    return absl::UnavailableError(ErrnoStatus(errno, absl::StrCat(where, ": send")).message());
  }

  SegmentTable table;
  std::vector<char> buffer(kMaxMessageBytes);
  bool first = true;
  for (;;) {
    iovec iov{buffer.data(), buffer.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(kMaxSegmentsPerMessage * sizeof(int))];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t got;
    do {
      got = recvmsg(fd.get(), &msg, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    const int error = errno;
    // Descriptors first: whatever else is wrong, they get closed.
    std::vector<UniqueFd> fds;
    if (got >= 0) TakeDescriptors(msg, &fds);
    if (got < 0) {
      return absl::UnavailableError(
          ErrnoStatus(error, absl::StrCat(where, ": no answer")).message());
    }
    if (got == 0) return absl::UnavailableError(absl::StrCat(where, ": closed without an answer"));
    if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
        static_cast<size_t>(got) < sizeof(WireHeader)) {
      return absl::InternalError(absl::StrCat(where, ": malformed answer"));
    }
    WireHeader header;
    std::memcpy(&header, buffer.data(), sizeof(header));
    if (header.magic != kWireMagic) {
      return absl::InternalError(absl::StrCat(where, ": not a segment table"));
    }
    if (header.code != 0) {
      const size_t text = std::min(static_cast<size_t>(got) - sizeof(header), kMaxErrorBytes);
      const auto code = header.code <= static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)
                            ? static_cast<absl::StatusCode>(header.code)
                            : absl::StatusCode::kUnknown;
      return absl::Status(code, std::string(buffer.data() + sizeof(header), text));
    }
    if (header.count > kMaxSegmentsPerMessage || fds.size() != header.count ||
        static_cast<size_t>(got) != sizeof(header) + header.count * sizeof(WireSegment) ||
        (!first && header.epoch != table.epoch) ||
        table.segments.size() + header.count > kMaxSegments) {
      return absl::InternalError(absl::StrCat(where, ": inconsistent segment table"));
    }
    first = false;
    table.epoch = header.epoch;
    for (uint32_t i = 0; i < header.count; ++i) {
      WireSegment range;
      std::memcpy(&range, buffer.data() + sizeof(header) + i * sizeof(WireSegment), sizeof(range));
      if (range.length == 0 || range.offset > pool_bytes ||
          range.length > pool_bytes - range.offset) {
        return absl::InternalError(absl::StrCat(where, ": segment [", range.offset, ", +",
                                                range.length, ") lies outside the pool of ",
                                                pool_bytes, " bytes"));
      }
      table.segments.push_back({range, std::move(fds[i])});
    }
    if (header.last != 0) return table;
  }
}

absl::StatusOr<std::string> ReceiveSessionId(int socket) {
  char buffer[kMaxSessionIdBytes + 1];
  ssize_t got;
  do {
    got = recv(socket, buffer, sizeof(buffer), MSG_DONTWAIT | MSG_TRUNC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return ErrnoStatus(errno, "segment socket: receive");
  if (got == 0) return absl::InvalidArgumentError("segment request: empty session id");
  if (static_cast<size_t>(got) > kMaxSessionIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("segment request: session id of ", got,
                                                   " bytes; at most ", kMaxSessionIdBytes));
  }
  return std::string(buffer, static_cast<size_t>(got));
}

absl::Status SendSegmentTable(int socket, uint64_t epoch, const std::vector<WireSegment>& segments,
                              const std::vector<int>& fds) {
  if (segments.size() != fds.size()) {
    return absl::InternalError("segment table: one descriptor per segment");
  }
  std::vector<char> buffer(kMaxMessageBytes);
  size_t next = 0;
  do {
    const size_t count = std::min<size_t>(segments.size() - next, kMaxSegmentsPerMessage);
    WireHeader header;
    header.epoch = epoch;
    header.count = static_cast<uint32_t>(count);
    header.last = next + count == segments.size() ? 1 : 0;
    std::memcpy(buffer.data(), &header, sizeof(header));
    std::memcpy(buffer.data() + sizeof(header), segments.data() + next,
                count * sizeof(WireSegment));
    if (absl::Status s =
            SendMessage(socket, buffer.data(), sizeof(header) + count * sizeof(WireSegment),
                        fds.data() + next, count);
        !s.ok()) {
      return s;
    }
    next += count;
  } while (next < segments.size());
  return absl::OkStatus();
}

absl::Status SendSegmentError(int socket, const absl::Status& error) {
  WireHeader header;
  header.code = static_cast<uint32_t>(error.code());
  if (header.code == 0) header.code = static_cast<uint32_t>(absl::StatusCode::kUnknown);
  header.last = 1;
  const std::string text(error.message().substr(0, kMaxErrorBytes));
  std::vector<char> buffer(sizeof(header) + text.size());
  std::memcpy(buffer.data(), &header, sizeof(header));
  std::memcpy(buffer.data() + sizeof(header), text.data(), text.size());
  return SendMessage(socket, buffer.data(), buffer.size(), nullptr, 0);
}

}  // namespace ckpt::segments
