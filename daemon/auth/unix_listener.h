// The Unix socket, accepted by ckptd itself rather than by gRPC: each
// connection is handed to the gRPC server as a channel from its fd, so
// handlers can ask the kernel who is on the other end (SO_PEERCRED; see
// caller.h). gRPC's own unix: listener hides the fd.
//
// The socket file is created under umask 0077 and opened only as far as
// the access policy reaches (SocketAccess): to one group (0660) when the
// lists name that group alone, to everyone (0666) when they name users.
// Either way a connection from a user the policy does not admit is closed
// at accept (SO_PEERCRED), before gRPC reads a byte of it, each user has
// at most a set number of connections open at once (its own flood cannot
// take the descriptors others need), and every call is checked again.
//
// Thread-safety: Start and Stop from one thread.
#ifndef CKPT_DAEMON_AUTH_UNIX_LISTENER_H_
#define CKPT_DAEMON_AUTH_UNIX_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/server.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckpt::auth {

// Who the socket file lets connect (the kernel's check, before ours).
struct SocketAccess {
  enum class Reach { kOwner, kGroup, kEveryone };
  Reach reach = Reach::kOwner;
  gid_t group = 0;  // kGroup
  std::string Describe() const;
};

// Binds and listens on a Unix socket of `type` (SOCK_STREAM, SOCK_SEQPACKET)
// at `path`, replacing a stale file, created under umask 0077 and opened as
// `access` says. A group the daemon may not give the file to (it is neither
// root nor a member) opens it to everyone instead, with a warning: the
// check at accept still holds. Returns the listening descriptor.
absl::StatusOr<int> BindUnixSocket(const std::string& path, int type, const SocketAccess& access);

class UnixListener {
 public:
  UnixListener() = default;
  ~UnixListener() { Stop(); }
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Whether the process connected on `fd` (uid and gid from SO_PEERCRED)
  // may call at all.
  using Admit = std::function<bool(int fd, uid_t uid, gid_t gid)>;

  // Binds `path` (replacing a stale socket file), sets its mode, and
  // accepts connections for `server` (started, and outliving Stop) until
  // Stop: those `admit` allows, at most `max_per_user` open at once per uid
  // (0: no limit).
  absl::Status Start(const std::string& path, const SocketAccess& access, Admit admit,
                     int max_per_user, grpc::Server* server);
  // Stops accepting; connections already handed over stay with gRPC.
  void Stop();
  uint64_t accepted() const { return accepted_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  void Run(grpc::Server* server);
  // Whether `uid` may open one more connection; forgets those its peers
  // closed. A duplicate of each open connection's descriptor tells (gRPC
  // shuts a connection down before it closes it, so the duplicate never
  // keeps one alive).
  bool HasRoom(uid_t uid);

  Admit admit_;
  int max_per_user_ = 0;
  std::map<uid_t, std::vector<int>> open_;  // accept thread only (and Stop, after it)
  int fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_UNIX_LISTENER_H_
