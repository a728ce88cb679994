#include "daemon/service/segment_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/auth/unix_listener.h"
#include "proto/lib/segment_handover.h"
#include "proto/lib/status_context.h"

namespace ckpt::service {
namespace {

struct Pending {
  int fd;
  absl::Time deadline;
  uid_t uid;
};

// Makes room for one more connection of `uid`: drops that user's oldest
// when it has its share waiting, else, when all are taken, the oldest of
// the user with the most waiting (never one of a user with fewer).
void MakeRoom(std::deque<Pending>& pending, uid_t uid, size_t per_user, size_t total) {
  std::map<uid_t, size_t> counts;
  for (const Pending& p : pending) ++counts[p.uid];
  uid_t victim = uid;
  if (counts[uid] < per_user) {
    if (pending.size() < total) return;
    size_t most = 0;
    for (const auto& [who, n] : counts) {
      if (n > most) most = n, victim = who;
    }
  }
  for (auto it = pending.begin(); it != pending.end(); ++it) {
    if (it->uid == victim) {
      close(it->fd);
      pending.erase(it);
      return;
    }
  }
}

}  // namespace

absl::Status SegmentServer::Start(const std::string& path, const auth::SocketAccess& access) {
  absl::StatusOr<int> fd = auth::BindUnixSocket(path, SOCK_SEQPACKET, access);
  if (!fd.ok()) return fd.status();
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    const int error = errno;
    close(*fd);
    return ErrnoStatus(error, "eventfd");
  }
  listen_fd_ = *fd;
  path_ = path;
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void SegmentServer::Stop() {
  if (listen_fd_ < 0) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_fd_);
  unlink(path_.c_str());
  listen_fd_ = -1;
  wake_fd_ = -1;
}

void SegmentServer::Run() {
  std::deque<Pending> pending;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Pending& p : pending) fds.push_back({p.fd, POLLIN, 0});
    int timeout_ms = -1;
    const absl::Time now = absl::Now();
    for (const Pending& p : pending) {
      const int64_t left = absl::ToInt64Milliseconds(p.deadline - now) + 1;
      timeout_ms = timeout_ms < 0
                       ? static_cast<int>(std::max<int64_t>(left, 0))
                       : std::min(timeout_ms, static_cast<int>(std::max<int64_t>(left, 0)));
    }
    const int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      const int error = errno;
      std::fprintf(stderr, "ckptd: segment socket: poll: %s; not serving segments\n",
                   ErrnoMessage(error).c_str());
      break;
    }
    if (fds[0].revents != 0) break;  // Stop
    // Requests first, then expiries, then new connections: indexes in fds
    // follow `pending` as it was when polled.
    std::deque<Pending> still;
    const absl::Time after = absl::Now();
    for (size_t i = 0; i < pending.size(); ++i) {
      const short revents = ready > 0 ? fds[i + 2].revents : 0;
      if ((revents & POLLIN) != 0) {
        Serve(pending[i].fd);
        close(pending[i].fd);
      } else if (revents != 0 || after >= pending[i].deadline) {
        close(pending[i].fd);  // hung up, or sent nothing in time
      } else {
        still.push_back(pending[i]);
      }
    }
    pending.swap(still);
    if (ready > 0 && (fds[1].revents & POLLIN) != 0) {
      const int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      ucred peer{};
      socklen_t len = sizeof(peer);
      if (conn >= 0 && (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 ||
                        !admit_(conn, peer.uid, peer.gid))) {
        // Not one of the allowed users: nothing of it waits, or displaces.
        refused_.fetch_add(1, std::memory_order_relaxed);
        (void)segments::SendSegmentError(
            conn, absl::PermissionDeniedError(
                      absl::StrCat("uid ", peer.uid, " may not use ckptd's segment socket")));
        close(conn);
      } else if (conn >= 0) {
        MakeRoom(pending, peer.uid, kMaxPendingPerUser, kMaxPending);
        pending.push_back({conn, absl::Now() + kRequestDeadline, peer.uid});
      } else if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the connection waits in the backlog; back off
        // instead of spinning on a listener that stays readable.
        usleep(100 * 1000);
      }
    }
  }
  for (const Pending& p : pending) close(p.fd);
}

void SegmentServer::Serve(int conn) {
  auto refuse = [&](const absl::Status& why) { (void)segments::SendSegmentError(conn, why); };
  absl::StatusOr<std::string> request = segments::ReceiveSessionId(conn);
  if (!request.ok()) return refuse(request.status());
  ucred peer{};
  socklen_t len = sizeof(peer);
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
    return refuse(absl::InternalError("segment socket: cannot read the peer's credentials"));
  }
  absl::StatusOr<pool::OwnerSegments> table = tables_(*request, peer.uid);
  if (!table.ok()) return refuse(table.status());
  std::vector<int> fds;
  fds.reserve(table->fds.size());
  for (const segments::UniqueFd& fd : table->fds) fds.push_back(fd.get());
  (void)segments::SendSegmentTable(conn, table->epoch, table->ranges, fds);
}

}  // namespace ckpt::service
