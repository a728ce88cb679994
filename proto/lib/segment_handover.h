// The segment handover: how a rank gets its job's pool memory. The pool is
// not one shared file any more (any process of the daemon's user could map
// every job's staged bytes); it is a set of segments, each a memfd, and a
// segment belongs to one job at a time. A rank asks the daemon's segment
// socket (AF_UNIX, SOCK_SEQPACKET) for its session's table and receives the
// job's segments as file descriptors (SCM_RIGHTS). The daemon checks the
// asker's uid (SO_PEERCRED) against the session's, so a file descriptor
// never reaches a process of another user or of another job.
//
// The same exchange hands a load from the memory tier the files it reads,
// read-only (node.proto LoadResponse.memory_bytes): the request is then
// LoadSpaceRequest(session, load id), and the "segments" are the files, laid
// out in the load's memory space.
//
// The exchange, one connection per table:
//   rank   -> daemon  one message: the session id (at most kMaxSessionIdBytes)
//   daemon -> rank    one or more messages, each a WireHeader followed by
//                     `count` WireSegments and carrying `count` descriptors;
//                     the last has last = 1. An error is a single message
//                     with code != 0 followed by the error text.
//
// Thread-safety: free functions, no shared state.
#ifndef CKPT_PROTO_LIB_SEGMENT_HANDOVER_H_
#define CKPT_PROTO_LIB_SEGMENT_HANDOVER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ckpt::segments {

inline constexpr size_t kMaxSessionIdBytes = 128;
inline constexpr uint32_t kMaxSegmentsPerMessage = 64;
// More segments than any pool has (the daemon makes at most 256): a table
// beyond it is refused before anything is kept.
inline constexpr uint64_t kMaxSegments = 4096;
inline constexpr size_t kMaxErrorBytes = 1024;

// Where the daemon's shared memory sits in 2 MiB pages, a rank maps them as
// such (one page table entry per 2 MiB, not 512) only at addresses aligned
// as the offsets are: the daemon lays a load's files in its memory space on
// these boundaries, and a rank reserves its spaces on them.
inline constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

// The request for a load's memory space: the session, a newline, the load.
inline std::string LoadSpaceRequest(std::string_view session, std::string_view load_id) {
  return std::string(session) + "\n" + std::string(load_id);
}

inline constexpr uint32_t kWireMagic = 0x47455343;  // "CSEG"

struct WireHeader {
  uint32_t magic = kWireMagic;
  uint32_t code = 0;  // absl::StatusCode; 0 is a table
  uint64_t epoch = 0;
  uint32_t count = 0;
  uint32_t last = 0;
};

struct WireSegment {
  uint64_t offset = 0;  // from the start of the pool
  uint64_t length = 0;
  uint64_t generation = 0;  // a new memfd for the same range has a new one
};

// A file descriptor that closes itself.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.Release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset();

 private:
  int fd_ = -1;
};

struct ReceivedSegment {
  WireSegment range;
  UniqueFd fd;
};

struct SegmentTable {
  uint64_t epoch = 0;
  std::vector<ReceivedSegment> segments;
};

// Rank side: connects to `socket_path`, asks for `session`'s table and
// checks what comes back: every range inside [0, pool_bytes), one
// descriptor per range, no more than kMaxSegments. The daemon's error comes
// back with its code; a silent or malformed daemon is UNAVAILABLE or
// INTERNAL naming the socket.
absl::StatusOr<SegmentTable> FetchSegmentTable(const std::string& socket_path,
                                               const std::string& session, uint64_t pool_bytes,
                                               absl::Duration timeout);

// Daemon side, on a connected socket. ReceiveSessionId reads the request
// without waiting (the caller polled it readable): INVALID_ARGUMENT for an
// empty, oversized or truncated one.
absl::StatusOr<std::string> ReceiveSessionId(int socket);
// Sends `segments` with their descriptors (parallel vectors), in messages
// of at most kMaxSegmentsPerMessage, without blocking.
absl::Status SendSegmentTable(int socket, uint64_t epoch, const std::vector<WireSegment>& segments,
                              const std::vector<int>& fds);
absl::Status SendSegmentError(int socket, const absl::Status& error);

}  // namespace ckpt::segments

#endif  // CKPT_PROTO_LIB_SEGMENT_HANDOVER_H_
