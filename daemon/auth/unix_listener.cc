#include "daemon/auth/unix_listener.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <grpcpp/server_posix.h>

#include "absl/strings/str_cat.h"

namespace ckpt::auth {
namespace {

constexpr int kBacklog = 1024;

}  // namespace

absl::StatusOr<int> BindUnixSocket(const std::string& path, int type, bool open_to_others) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is longer than ",
                                                   sizeof(address.sun_path) - 1, " bytes"));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket(AF_UNIX): ", strerror(errno)));
  unlink(path.c_str());  // a stale socket of a killed daemon (the caller checked none serves it)
  // No other user may connect while the mode is being set.
  const mode_t old_umask = umask(0077);
  const int bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  const int bind_error = errno;
  umask(old_umask);
  if (bound != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot bind unix:", path, ": ", strerror(bind_error)));
  }
  if (open_to_others && chmod(path.c_str(), 0666) != 0) {
    const int error = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("chmod 0666 ", path, ": ", strerror(error)));
  }
  if (listen(fd, kBacklog) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix:", path, ": ", strerror(error)));
  }
  return fd;
}

absl::Status UnixListener::Start(const std::string& path, bool open_to_others,
                                 grpc::Server* server) {
  absl::StatusOr<int> fd = BindUnixSocket(path, SOCK_STREAM, open_to_others);
  if (!fd.ok()) return fd.status();
  fd_ = *fd;
  thread_ = std::thread([this, server] { Run(server); });
  return absl::OkStatus();
}

void UnixListener::Run(grpc::Server* server) {
  for (;;) {
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (stopping_.load()) {
      if (conn >= 0) close(conn);
      return;
    }
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the pending connection waits in the backlog;
        // back off instead of spinning.
        std::fprintf(stderr, "ckptd: accept on the Unix socket: %s\n", strerror(errno));
        usleep(100 * 1000);
        continue;
      }
      std::fprintf(stderr, "ckptd: accept on the Unix socket failed: %s; not accepting more\n",
                   strerror(errno));
      return;
    }
    accepted_.fetch_add(1, std::memory_order_relaxed);
    grpc::AddInsecureChannelFromFd(server, conn);  // gRPC owns conn from here
  }
}

void UnixListener::Stop() {
  if (fd_ < 0) return;
  stopping_.store(true);
  // Wakes the blocked accept (it returns EINVAL on a shut-down listener).
  shutdown(fd_, SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
  close(fd_);
  fd_ = -1;
}

}  // namespace ckpt::auth
