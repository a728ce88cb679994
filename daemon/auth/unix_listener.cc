#include "daemon/auth/unix_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <grpcpp/server_posix.h>

#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"

namespace ckpt::auth {
namespace {

constexpr int kBacklog = 1024;

}  // namespace

std::string SocketAccess::Describe() const {
  switch (reach) {
    case Reach::kOwner:
      return "0600, the daemon's user only";
    case Reach::kGroup:
      return absl::StrCat("0660, group ", group);
    case Reach::kEveryone:
      return "0666, checked at accept";
  }
  return "?";
}

absl::StatusOr<int> BindUnixSocket(const std::string& path, int type, const SocketAccess& access) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is longer than ",
                                                   sizeof(address.sun_path) - 1, " bytes"));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(errno, "socket(AF_UNIX)");
  unlink(path.c_str());  // a stale socket of a killed daemon (the caller checked none serves it)
  // No other user may connect while the mode is being set.
  const mode_t old_umask = umask(0077);
  const int bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  const int bind_error = errno;
  umask(old_umask);
  if (bound != 0) {
    close(fd);
    return ErrnoStatus(bind_error, absl::StrCat("cannot bind unix:", path));
  }
  mode_t mode = 0600;
  if (access.reach == SocketAccess::Reach::kGroup) {
    if (chown(path.c_str(), static_cast<uid_t>(-1), access.group) == 0) {
      mode = 0660;
    } else {
      const int error = errno;
      std::fprintf(stderr,
                   "ckptd: warning: cannot give %s to group %u (%s): opening it to every user; "
                   "the allow-lists are still checked at accept\n",
                   path.c_str(), static_cast<unsigned>(access.group), ErrnoMessage(error).c_str());
      mode = 0666;
    }
  } else if (access.reach == SocketAccess::Reach::kEveryone) {
    mode = 0666;
  }
  if (chmod(path.c_str(), mode) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoStatus(error, absl::StrCat("chmod ", absl::Hex(mode), " ", path));
  }
  if (listen(fd, kBacklog) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoStatus(error, absl::StrCat("cannot listen on unix:", path));
  }
  return fd;
}

absl::Status UnixListener::Start(const std::string& path, const SocketAccess& access, Admit admit,
                                 int max_per_user, grpc::Server* server) {
  absl::StatusOr<int> fd = BindUnixSocket(path, SOCK_STREAM, access);
  if (!fd.ok()) return fd.status();
  admit_ = std::move(admit);
  max_per_user_ = max_per_user;
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
      const int error = errno;
      if (error == EINTR || error == ECONNABORTED) continue;
      if (error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM) {
        // Out of descriptors: the pending connection waits in the backlog;
        // back off instead of spinning.
        std::fprintf(stderr, "ckptd: accept on the Unix socket: %s\n", ErrnoMessage(error).c_str());
        usleep(100 * 1000);
        continue;
      }
      std::fprintf(stderr, "ckptd: accept on the Unix socket failed: %s; not accepting more\n",
                   ErrnoMessage(error).c_str());
      return;
    }
    ucred peer{};
    socklen_t length = sizeof(peer);
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 ||
        (admit_ && !admit_(conn, peer.uid, peer.gid)) || !HasRoom(peer.uid)) {
      // Refused before gRPC reads a byte: the client sees its connection
      // close (UNAVAILABLE).
      refused_.fetch_add(1, std::memory_order_relaxed);
      close(conn);
      continue;
    }
    if (max_per_user_ > 0) {
      const int watch = fcntl(conn, F_DUPFD_CLOEXEC, 0);
      if (watch >= 0) open_[peer.uid].push_back(watch);
    }
    accepted_.fetch_add(1, std::memory_order_relaxed);
    grpc::AddInsecureChannelFromFd(server, conn);  // gRPC owns conn from here
  }
}

bool UnixListener::HasRoom(uid_t uid) {
  if (max_per_user_ <= 0) return true;
  std::vector<int>& fds = open_[uid];
  if (static_cast<int>(fds.size()) < max_per_user_) return true;
  std::vector<int> alive;
  for (int fd : fds) {
    pollfd p{fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) {
      close(fd);
    } else {
      alive.push_back(fd);
    }
  }
  fds.swap(alive);
  if (static_cast<int>(fds.size()) < max_per_user_) return true;
  return false;
}

void UnixListener::Stop() {
  if (fd_ < 0) return;
  stopping_.store(true);
  // Wakes the blocked accept (it returns EINVAL on a shut-down listener).
  shutdown(fd_, SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
  close(fd_);
  fd_ = -1;
  for (auto& [uid, fds] : open_) {
    for (int fd : fds) close(fd);
  }
  open_.clear();
}

}  // namespace ckpt::auth
