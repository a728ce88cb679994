#include "tests/support/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "proto/lib/status_context.h"

namespace ckpt::testing {
namespace {

// Closes the socket on every return.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Waits until fd is ready for `events` or the deadline passes.
bool WaitFd(int fd, short events, absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  if (ms <= 0) return false;
  pollfd p{fd, events, 0};
  return poll(&p, 1, static_cast<int>(ms)) == 1;
}

}  // namespace

absl::StatusOr<HttpReply> HttpGet(const std::string& host_port, const std::string& path,
                                  absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::pair<std::string, std::string> hp = absl::StrSplit(host_port, ':');
  int port = 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (!absl::SimpleAtoi(hp.second, &port) ||
      inet_pton(AF_INET, hp.first.c_str(), &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad address ", host_port));
  }
  address.sin_port = htons(static_cast<uint16_t>(port));
  Fd s{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (s.fd < 0) return ErrnoStatus(errno, "socket");
  // A server that cannot be reached is UNAVAILABLE whatever the errno.
  if (connect(s.fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const int connect_error = errno;  // before WaitFd's poll
    if (connect_error != EINPROGRESS || !WaitFd(s.fd, POLLOUT, deadline)) {
      return absl::UnavailableError(
          absl::StrCat("connect ", host_port, ": ", ErrnoMessage(connect_error)));
    }
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      return absl::UnavailableError(absl::StrCat("connect ", host_port, ": ", ErrnoMessage(error)));
    }
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host_port, "\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    if (!WaitFd(s.fd, POLLOUT, deadline)) return absl::DeadlineExceededError("sending the request");
    const ssize_t n = send(s.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("send: ", ErrnoMessage(errno)));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string reply;
  char buffer[65536];
  for (;;) {
    if (!WaitFd(s.fd, POLLIN, deadline)) return absl::DeadlineExceededError("reading the reply");
    const ssize_t n = recv(s.fd, buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("recv: ", ErrnoMessage(errno)));
    }
    reply.append(buffer, static_cast<size_t>(n));
  }
  const size_t end = reply.find("\r\n\r\n");
  HttpReply out;
  // "HTTP/1.x 200 OK"
  if (end == std::string::npos || reply.size() < 12 ||
      !absl::SimpleAtoi(reply.substr(9, 3), &out.status)) {
    return absl::DataLossError(absl::StrCat("not an HTTP reply: ", reply.substr(0, 200)));
  }
  out.body = reply.substr(end + 4);
  return out;
}

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace ckpt::testing
