// The Unix socket, accepted by ckptd itself rather than by gRPC: each
// connection is handed to the gRPC server as a channel from its fd, so
// handlers can ask the kernel who is on the other end (SO_PEERCRED; see
// caller.h). gRPC's own unix: listener hides the fd.
//
// The socket file is created under umask 0077; it is opened to other users
// (0666) only when the access policy admits any, and then every call is
// checked against the policy.
//
// Thread-safety: Start and Stop from one thread.
#ifndef CKPT_DAEMON_AUTH_UNIX_LISTENER_H_
#define CKPT_DAEMON_AUTH_UNIX_LISTENER_H_

#include <atomic>
#include <string>
#include <thread>

#include <grpcpp/server.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckpt::auth {

// Binds and listens on a Unix socket of `type` (SOCK_STREAM, SOCK_SEQPACKET)
// at `path`, replacing a stale file, created under umask 0077 and opened to
// other users (0666) only when asked. Returns the listening descriptor.
absl::StatusOr<int> BindUnixSocket(const std::string& path, int type, bool open_to_others);

class UnixListener {
 public:
  UnixListener() = default;
  ~UnixListener() { Stop(); }
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Binds `path` (replacing a stale socket file), sets its mode, and
  // accepts connections for `server` (started, and outliving Stop) until
  // Stop.
  absl::Status Start(const std::string& path, bool open_to_others, grpc::Server* server);
  // Stops accepting; connections already handed over stay with gRPC.
  void Stop();
  uint64_t accepted() const { return accepted_.load(std::memory_order_relaxed); }

 private:
  void Run(grpc::Server* server);

  int fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> accepted_{0};
};

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_UNIX_LISTENER_H_
