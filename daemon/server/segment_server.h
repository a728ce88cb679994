// The segment socket: hands each rank its job's pool segments as file
// descriptors (protocol in proto/lib/segment_handover.h). A request names a
// session; the answer is that session's job's segments, and only when the
// asking process runs as the uid that attached the session (SO_PEERCRED).
//
// One thread, one poll loop: a request is answered without blocking, and a
// connection that sends nothing is closed after a short deadline, so no
// client can hold the thread or pile up descriptors (at most kMaxPending
// connections wait; the oldest is dropped for a new one).
//
// Thread-safety: Start and Stop from one thread.
#ifndef CKPT_DAEMON_SERVER_SEGMENT_SERVER_H_
#define CKPT_DAEMON_SERVER_SEGMENT_SERVER_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/pool/shm_pool.h"

namespace ckpt::server {

// The segment socket beside the daemon's gRPC socket.
inline std::string SegmentSocketPath(const std::string& socket_path) {
  return socket_path + ".seg";
}

class SegmentServer {
 public:
  // The pool owner (job) whose segments `uid` may have through `session`,
  // or the error to send back (NOT_FOUND, PERMISSION_DENIED).
  using Resolve = std::function<absl::StatusOr<std::string>(const std::string& session, uid_t uid)>;

  SegmentServer(pool::ShmPool& pool, Resolve resolve) : pool_(pool), resolve_(std::move(resolve)) {}
  ~SegmentServer() { Stop(); }
  SegmentServer(const SegmentServer&) = delete;
  SegmentServer& operator=(const SegmentServer&) = delete;

  absl::Status Start(const std::string& path, bool open_to_others);
  void Stop();

  static constexpr size_t kMaxPending = 64;
  static constexpr absl::Duration kRequestDeadline = absl::Seconds(2);

 private:
  void Run();
  // Answers the request waiting on `conn`; the caller closes it.
  void Serve(int conn);

  pool::ShmPool& pool_;
  const Resolve resolve_;
  std::string path_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd that Stop signals
  std::thread thread_;
};

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_SEGMENT_SERVER_H_
