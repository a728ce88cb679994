#include "daemon/peer/peer_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/lib/status_context.h"

namespace ckpt::peer {
namespace {

absl::Status SplitAddress(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  int number = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &number) ||
      number < 0 || number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer address \"", address, "\" is not host:port"));
  }
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  *port = address.substr(colon + 1);
  return absl::OkStatus();
}

absl::StatusOr<addrinfo*> Resolve(const std::string& address, bool passive) {
  std::string host, port;
  if (absl::Status s = SplitAddress(address, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer address \"", address, "\": ", gai_strerror(rc)));
  }
  return found;
}

timeval SocketTimeout(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return timeval{0, 1000};  // 0 would mean "forever"
  return absl::ToTimeval(d);
}

}  // namespace

namespace {

// The first of the address's resolutions for which `use` succeeds on a new
// socket (use returns 0, or an errno); the socket is closed otherwise.
absl::StatusOr<int> FirstSocket(const std::string& address, bool passive,
                                const std::function<int(int fd, const addrinfo&)>& use,
                                const std::string& doing) {
  absl::StatusOr<addrinfo*> found = Resolve(address, passive);
  if (!found.ok()) return found.status();
  int fd = -1;
  int err = 0;
  for (addrinfo* a = *found; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if ((err = use(fd, *a)) == 0) break;
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(*found);
  if (fd < 0) return ErrnoStatus(err, doing);
  return fd;
}

}  // namespace

absl::StatusOr<int> ListenTcp(const std::string& address, int* port) {
  absl::StatusOr<int> fd = FirstSocket(
      address, /*passive=*/true,
      [](int fd, const addrinfo& a) {
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        return ::bind(fd, a.ai_addr, a.ai_addrlen) == 0 && ::listen(fd, 128) == 0 ? 0 : errno;
      },
      absl::StrCat("cannot listen on ", address));
  if (!fd.ok()) return fd.status();
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(*fd, reinterpret_cast<sockaddr*>(&bound), &length);
  *port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

absl::StatusOr<int> ConnectTcp(const std::string& address, absl::Duration timeout) {
  return FirstSocket(
      address, /*passive=*/false,
      [timeout](int fd, const addrinfo& a) {
        SetTimeouts(fd, timeout, timeout);  // SO_SNDTIMEO bounds connect() too
        if (::connect(fd, a.ai_addr, a.ai_addrlen) == 0) return 0;
        return errno == EINPROGRESS ? ETIMEDOUT : errno;
      },
      absl::StrCat("cannot connect to peer ", address));
}

void SetTimeouts(int fd, absl::Duration receive, absl::Duration send) {
  const timeval r = SocketTimeout(receive), s = SocketTimeout(send);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &s, sizeof s);
}

namespace {

// The remote address of `fd` and its port; false when unknown.
bool Remote(int fd, std::string* host, int* port) {
  sockaddr_storage peer{};
  socklen_t length = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return false;
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&peer);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    *port = ntohs(a->sin6_port);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&peer);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    *port = ntohs(a->sin_port);
  }
  *host = text;
  return true;
}

}  // namespace

std::string PeerName(int fd) {
  std::string host;
  int port = 0;
  if (!Remote(fd, &host, &port)) return "an unknown peer";
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port)
                                             : absl::StrCat(host, ":", port);
}

std::string RemoteHost(int fd) {
  std::string host;
  int port = 0;
  return Remote(fd, &host, &port) ? host : std::string();
}

absl::Status ReadFull(int fd, char* p, uint64_t n, const std::string& peer, absl::Time deadline) {
  while (n > 0) {
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      pollfd ready{fd, POLLIN, 0};
      const int rc = left <= absl::ZeroDuration()
                         ? 0
                         : ::poll(&ready, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) {
        return absl::DeadlineExceededError(absl::StrCat(peer, " did not finish in time"));
      }
    }
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<uint64_t>(k);
      continue;
    }
    // A reset is a close too: a peer that closes with our bytes unread in
    // its buffer (an Ack it never read) resets instead of closing.
    if (k == 0 || (k < 0 && errno == ECONNRESET)) {
      return absl::UnavailableError(absl::StrCat(peer, " closed the connection"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return absl::DeadlineExceededError(absl::StrCat(peer, " sent nothing within the timeout"));
    }
    return ErrnoStatus(errno, absl::StrCat("reading from ", peer));
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int fd, iovec* iov, int count, const std::string& peer) {
  while (count > 0) {
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = static_cast<size_t>(count);
    const ssize_t k = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError(absl::StrCat(peer, " took nothing within the timeout"));
      }
      return ErrnoStatus(errno, absl::StrCat("writing to ", peer));
    }
    size_t sent = static_cast<size_t>(k);
    while (count > 0 && sent >= iov->iov_len) {
      sent -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + sent;
      iov->iov_len -= sent;
    }
  }
  return absl::OkStatus();
}

absl::Status SendFileFull(int fd, int file, uint64_t offset, uint64_t length,
                          const std::string& peer) {
  // sendfile has no MSG_NOSIGNAL: a peer that hung up would raise SIGPIPE
  // and kill the daemon. Blocked on this thread for the call, and one
  // raised meanwhile is taken off before unblocking (EPIPE says it all).
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, &pipe_only, &before);
  struct Restore {
    const sigset_t& mask;
    const sigset_t& before;
    ~Restore() {
      sigset_t pending;
      if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) &&
          !sigismember(&before, SIGPIPE)) {
        const timespec now{0, 0};
        while (sigtimedwait(&mask, nullptr, &now) < 0 && errno == EINTR) {
        }
      }
      pthread_sigmask(SIG_SETMASK, &before, nullptr);
    }
  } restore{pipe_only, before};
  off_t at = static_cast<off_t>(offset);
  while (length > 0) {
    const ssize_t k = ::sendfile(fd, file, &at, length);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError(absl::StrCat(peer, " took nothing within the timeout"));
      }
      if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
        return absl::UnavailableError(absl::StrCat(peer, " closed the connection"));
      }
      // The file's side (EIO, EINVAL, ENOMEM, ...): this end's fault.
      return absl::DataLossError(
          absl::StrCat("sending a file to ", peer, ": ", ErrnoMessage(errno)));
    }
    if (k == 0) {
      return absl::DataLossError(
          absl::StrCat("sending a file to ", peer, ": it ends ", length, " bytes early"));
    }
    length -= static_cast<uint64_t>(k);
  }
  return absl::OkStatus();
}

}  // namespace ckpt::peer
