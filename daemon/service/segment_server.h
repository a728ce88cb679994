// The segment socket: hands each rank its job's pool segments as file
// descriptors (protocol in proto/lib/segment_handover.h), and a load from
// the memory tier the files it reads. A request names a session (and a
// load); the answer is what the daemon's Tables says for it and the asking
// process's uid (SO_PEERCRED): only the uid that attached the session gets
// its job's segments or files.
//
// One thread, one poll loop: a request is answered without blocking, and a
// connection that sends nothing is closed after a short deadline, so no
// client can hold the thread or pile up descriptors. A connection from a
// user the access policy does not admit is closed at accept (SO_PEERCRED),
// before it can wait. Those that wait are bounded per user (a user's
// oldest is dropped for its own new one) and in all (the oldest of the
// user with the most waiting goes): one user's flood never drops another
// user's request.
//
// Thread-safety: Start and Stop from one thread.
#ifndef CKPT_DAEMON_SERVICE_SEGMENT_SERVER_H_
#define CKPT_DAEMON_SERVICE_SEGMENT_SERVER_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/auth/unix_listener.h"
#include "daemon/pool/shm_pool.h"

namespace ckpt::service {

// The segment socket beside the daemon's gRPC socket.
inline std::string SegmentSocketPath(const std::string& socket_path) {
  return socket_path + ".seg";
}

class SegmentServer {
 public:
  // What `uid` may have for `request` (the bytes a rank sent), or the
  // error to send back (NOT_FOUND, PERMISSION_DENIED). Called on the
  // server's thread: it must not block.
  using Tables =
      std::function<absl::StatusOr<pool::OwnerSegments>(const std::string& request, uid_t uid)>;

  // Whether the process connected on `fd` (uid and gid from SO_PEERCRED)
  // may ask at all.
  using Admit = std::function<bool(int fd, uid_t uid, gid_t gid)>;

  SegmentServer(Tables tables, Admit admit)
      : tables_(std::move(tables)), admit_(std::move(admit)) {}
  ~SegmentServer() { Stop(); }
  SegmentServer(const SegmentServer&) = delete;
  SegmentServer& operator=(const SegmentServer&) = delete;

  absl::Status Start(const std::string& path, const auth::SocketAccess& access);
  void Stop();

  static constexpr size_t kMaxPending = 256;
  static constexpr size_t kMaxPendingPerUser = 16;
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  static constexpr absl::Duration kRequestDeadline = absl::Seconds(2);

 private:
  void Run();
  // Answers the request waiting on `conn`; the caller closes it.
  void Serve(int conn);

  const Tables tables_;
  const Admit admit_;
  std::atomic<uint64_t> refused_{0};
  std::string path_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd that Stop signals
  std::thread thread_;
};

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_SEGMENT_SERVER_H_
