// I/O engines: how the POSIX backend moves bytes between buffers and fds.
//
// Two engines behind one interface, chosen by NewIoEngine:
//  - io_uring (3FS style): one ring per thread, created lazily on the first
//    batch a thread runs, up to queue_depth ops in flight, reaped with a
//    minimum completion count; short transfers are resubmitted for the rest.
//  - pread/pwrite: one op after another; for filesystems or kernels that
//    refuse io_uring, and selectable by option.
// If io_uring cannot be set up (kernel refuses: EPERM, ENOSYS, ...) the
// io_uring choice falls back to pread/pwrite, once, with a line on stderr.
//
// O_DIRECT: an op may carry an O_DIRECT fd next to its buffered fd; each
// transfer uses the direct fd when its address, file offset and length are
// multiples of kDirectIoAlignment, the buffered fd otherwise (so the
// unaligned tail left by a short transfer, e.g. at EOF, goes buffered).
//
// Thread-safety: an engine may be used from many threads at once; each
// thread drives its own ring.
#ifndef CKPT_DAEMON_STORAGE_POSIX_IO_ENGINE_H_
#define CKPT_DAEMON_STORAGE_POSIX_IO_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ckpt::storage {

inline constexpr uint64_t kDirectIoAlignment = 4096;

struct EngineOp {
  int buffered_fd = -1;  // always valid
  int direct_fd = -1;    // O_DIRECT fd of the same file, or -1
  uint64_t offset = 0;
  void* buffer = nullptr;
  size_t length = 0;
  size_t done = 0;  // out: bytes transferred
};

enum class IoKind { kRead, kWrite };

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  // "io_uring" or "pread/pwrite": what actually runs, after any fallback.
  virtual std::string_view Name() const = 0;
  // Runs every op (all on the file `path`, which only names it in errors).
  // Writes transfer every byte or fail; reads stop early only at EOF, leaving
  // done < length. Returns the first error, naming the operation, path and
  // offset; ops may still have run (partly) when it fails.
  virtual absl::Status Run(IoKind kind, absl::Span<EngineOp> ops, std::string_view path) = 0;
  // Sets up the calling thread's share of the engine now rather than on its
  // first batch: io_uring creates the thread's ring and registers the fixed
  // buffers, which pins every page of them (0.2 s per ring for 4.5 GiB
  // here, seconds for a large pool).
  virtual void PrepareThread() {}
};

struct IoEngineOptions {
  bool use_io_uring = true;
  unsigned queue_depth = 32;  // ops in flight per thread (io_uring only)
};

std::unique_ptr<IoEngine> NewIoEngine(const IoEngineOptions& options);

// Registers [base, base + bytes) as io_uring fixed buffers for every ring of
// the process (each thread's ring registers them before its next batch), so
// transfers inside it skip the per-op page pinning (3FS: buffers registered
// once). Replaces an earlier registration. A ring whose registration the
// kernel refuses (RLIMIT_MEMLOCK, say) goes on with plain ops. The memory
// is registered in pieces of `piece_bytes` (at most 1 GiB, the kernel's
// limit per buffer), so that renewing part of it re-registers only the
// pieces it overlaps.
void RegisterFixedBuffers(void* base, size_t bytes, size_t piece_bytes = size_t{1} << 30);
// [base, base + bytes), inside the registered memory, has new pages at the
// same addresses (a pool segment given a fresh memfd): each ring updates
// the pieces it overlaps before its next batch, so no transfer reaches the
// old pages, and the old pages are unpinned. The caller guarantees no
// transfer into the range is in flight.
void RenewFixedBuffers(void* base, size_t bytes);
// Transfers that ran as READ_FIXED/WRITE_FIXED so far, process-wide.
uint64_t FixedBufferTransfers();

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_POSIX_IO_ENGINE_H_
