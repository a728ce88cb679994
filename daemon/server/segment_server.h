// The segment socket: hands each rank its job's pool segments as file
// descriptors (protocol in proto/lib/segment_handover.h), and a load from
// the memory tier the files it reads. A request names a session (and a
// load); the answer is what the daemon's Tables says for it and the asking
// process's uid (SO_PEERCRED): only the uid that attached the session gets
// its job's segments or files.
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
  // What `uid` may have for `request` (the bytes a rank sent), or the
  // error to send back (NOT_FOUND, PERMISSION_DENIED). Called on the
  // server's thread: it must not block.
  using Tables =
      std::function<absl::StatusOr<pool::OwnerSegments>(const std::string& request, uid_t uid)>;

  explicit SegmentServer(Tables tables) : tables_(std::move(tables)) {}
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

  const Tables tables_;
  std::string path_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd that Stop signals
  std::thread thread_;
};

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_SEGMENT_SERVER_H_
