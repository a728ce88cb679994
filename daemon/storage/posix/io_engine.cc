#include "daemon/storage/posix/io_engine.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "proto/lib/status_context.h"

#ifdef CKPT_HAVE_URING
#include <liburing.h>
#endif

namespace ckpt::storage {
namespace {

// Largest single transfer: keeps io_uring's 32-bit length and pwrite's
// ~2 GiB cap out of the way; a multiple of the direct I/O alignment so that
// the rest of an aligned op stays aligned.
constexpr size_t kMaxTransfer = size_t{1} << 30;

bool Aligned(uint64_t v) { return v % kDirectIoAlignment == 0; }

// The next transfer of an op: what is left, capped, on the right fd.
struct Transfer {
  int fd;
  bool direct;
  uint64_t offset;
  char* buffer;
  size_t length;
};

Transfer NextTransfer(const EngineOp& op, bool allow_direct) {
  Transfer t;
  t.offset = op.offset + op.done;
  t.buffer = static_cast<char*>(op.buffer) + op.done;
  t.length = std::min(op.length - op.done, kMaxTransfer);
  t.direct = allow_direct && op.direct_fd >= 0 && Aligned(t.offset) &&
             Aligned(reinterpret_cast<uintptr_t>(t.buffer)) && Aligned(t.length);
  t.fd = t.direct ? op.direct_fd : op.buffered_fd;
  return t;
}

absl::Status TransferError(int err, std::string_view op_name, std::string_view path,
                           uint64_t offset) {
  return ErrnoStatus(err, absl::StrFormat("%s %s at offset %d", op_name, path, offset));
}

absl::Status ZeroWriteError(std::string_view op_name, std::string_view path, uint64_t offset,
                            size_t wanted) {
  return absl::UnknownError(
      absl::StrFormat("%s %s at offset %d: wrote 0 of %d bytes", op_name, path, offset, wanted));
}

class SyncEngine : public IoEngine {
 public:
  std::string_view Name() const override { return "pread/pwrite"; }

  absl::Status Run(IoKind kind, absl::Span<EngineOp> ops, std::string_view path) override {
    for (EngineOp& op : ops) {
      absl::Status s = RunOne(kind, op, path);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status RunOne(IoKind kind, EngineOp& op, std::string_view path) {
    const char* name = kind == IoKind::kWrite ? "pwrite" : "pread";
    bool allow_direct = true;
    while (op.done < op.length) {
      const Transfer t = NextTransfer(op, allow_direct);
      const ssize_t n = kind == IoKind::kWrite ? ::pwrite(t.fd, t.buffer, t.length, t.offset)
                                               : ::pread(t.fd, t.buffer, t.length, t.offset);
      if (n < 0) {
        const int err = errno;
        if (err == EINTR) continue;
        // The filesystem accepted O_DIRECT at open but not this transfer
        // (stricter alignment): the page cache still works.
        if (err == EINVAL && t.direct) {
          allow_direct = false;
          continue;
        }
        return TransferError(err, name, path, t.offset);
      }
      if (n == 0) {
        if (kind == IoKind::kRead) return absl::OkStatus();  // EOF
        return ZeroWriteError(name, path, t.offset, t.length);
      }
      op.done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }
};

// The fixed buffers every ring should have: equal pieces from `base`. A
// new layout (RegisterFixedBuffers) makes rings register afresh; a renewed
// piece (RenewFixedBuffers) only has its entry updated.
struct FixedBuffers {
  std::mutex mu;
  std::vector<iovec> iovecs;               // guarded by mu
  std::vector<uint64_t> piece_generation;  // parallel to iovecs; guarded by mu
  uint64_t layout = 0;                     // guarded by mu
  uint64_t next_generation = 1;            // guarded by mu
};
FixedBuffers& Fixed() {
  static FixedBuffers* fixed = new FixedBuffers;
  return *fixed;
}
std::atomic<uint64_t> fixed_transfers{0};

}  // namespace

void RegisterFixedBuffers(void* base, size_t bytes, size_t piece_bytes) {
  // The kernel takes at most 1 GiB per buffer.
  constexpr size_t kMaxBuffer = size_t{1} << 30;
  const size_t piece = std::clamp<size_t>(piece_bytes, 1, kMaxBuffer);
  FixedBuffers& fixed = Fixed();
  std::lock_guard<std::mutex> lock(fixed.mu);
  fixed.iovecs.clear();
  fixed.piece_generation.clear();
  for (size_t off = 0; off < bytes; off += piece) {
    fixed.iovecs.push_back({static_cast<char*>(base) + off, std::min(piece, bytes - off)});
    fixed.piece_generation.push_back(fixed.next_generation++);
  }
  ++fixed.layout;
}

void RenewFixedBuffers(void* base, size_t bytes) {
  FixedBuffers& fixed = Fixed();
  std::lock_guard<std::mutex> lock(fixed.mu);
  const char* begin = static_cast<const char*>(base);
  const char* end = begin + bytes;
  for (size_t i = 0; i < fixed.iovecs.size(); ++i) {
    const char* piece = static_cast<const char*>(fixed.iovecs[i].iov_base);
    if (piece < end && begin < piece + fixed.iovecs[i].iov_len) {
      fixed.piece_generation[i] = fixed.next_generation++;
    }
  }
}

uint64_t FixedBufferTransfers() { return fixed_transfers.load(std::memory_order_relaxed); }

namespace {

#ifdef CKPT_HAVE_URING

constexpr unsigned kMaxQueueDepth = 4096;

// This thread's ring, shared by every io_uring engine the thread drives (a
// thread runs one batch at a time, and every batch leaves the ring empty).
class ThreadRing {
 public:
  ~ThreadRing() {
    if (initialized_) io_uring_queue_exit(&ring_);
  }
  // 0, or -errno from io_uring_queue_init. Grows the ring when an engine
  // with a deeper queue comes along.
  int Ensure(unsigned depth) {
    if (initialized_ && entries_ >= depth) return 0;
    if (initialized_) {
      io_uring_queue_exit(&ring_);
      initialized_ = false;
    }
    const int rc = io_uring_queue_init(depth, &ring_, 0);
    if (rc < 0) return rc;
    initialized_ = true;
    entries_ = depth;
    registered_layout_ = 0;
    iovecs_.clear();
    return 0;
  }
  io_uring* ring() { return &ring_; }

  // Only the threads that move pool data (PrepareThread: writers, readers)
  // register it. Any other thread (a request handler reading a MANIFEST)
  // would pin the whole pool for one small read: 0.2 s per 4.5 GiB, under
  // the process's mmap lock, which stalled the loads running beside it.
  void set_data_mover() { data_mover_ = true; }

  // Brings this ring's fixed buffers up to date with the process's: the
  // renewed pieces updated in place (buffers registered with tags allow
  // it), anything else registered afresh.
  void SyncFixedBuffers() {
    if (!data_mover_) return;
    FixedBuffers& fixed = Fixed();
    std::lock_guard<std::mutex> lock(fixed.mu);
    if (fixed.layout == registered_layout_) {
      if (iovecs_.empty()) return;  // refused before: plain ops
      bool stale = false;
      for (size_t i = 0; i < iovecs_.size() && !stale; ++i) {
        if (piece_generation_[i] == fixed.piece_generation[i]) continue;
        __u64 tag = 0;
        if (tagged_ && io_uring_register_buffers_update_tag(&ring_, static_cast<unsigned>(i),
                                                            &fixed.iovecs[i], &tag, 1) >= 0) {
          piece_generation_[i] = fixed.piece_generation[i];
        } else {
          stale = true;
        }
      }
      if (!stale) return;
    }
    if (!iovecs_.empty()) io_uring_unregister_buffers(&ring_);
    iovecs_.clear();
    registered_layout_ = fixed.layout;
    if (fixed.iovecs.empty()) return;
    const std::vector<__u64> tags(fixed.iovecs.size(), 0);
    int rc = io_uring_register_buffers_tags(&ring_, fixed.iovecs.data(), tags.data(),
                                            static_cast<unsigned>(fixed.iovecs.size()));
    tagged_ = rc == 0;
    if (rc == -EINVAL) {  // a kernel before 5.13: no tags, so renewals register afresh
      rc = io_uring_register_buffers(&ring_, fixed.iovecs.data(),
                                     static_cast<unsigned>(fixed.iovecs.size()));
    }
    if (rc == 0) {
      iovecs_ = fixed.iovecs;
      piece_generation_ = fixed.piece_generation;
      piece_bytes_ = iovecs_[0].iov_len;
      return;
    }
    static std::once_flag once;
    std::call_once(once, [rc] {
      const std::string line =
          absl::StrFormat("ckpt storage: %s; plain io_uring ops (raise LimitMEMLOCK to register)\n",
                          ErrnoStatus(-rc, "io_uring_register_buffers").message());
      std::fputs(line.c_str(), stderr);
    });
  }
  // The index of the registered buffer holding [p, p + n), or -1.
  int FixedIndex(const void* p, size_t n) const {
    if (iovecs_.empty()) return -1;
    const char* c = static_cast<const char*>(p);
    const char* base = static_cast<const char*>(iovecs_[0].iov_base);
    if (c < base) return -1;
    const size_t i = static_cast<size_t>(c - base) / piece_bytes_;
    if (i >= iovecs_.size()) return -1;
    const char* piece = static_cast<const char*>(iovecs_[i].iov_base);
    return c + n <= piece + iovecs_[i].iov_len ? static_cast<int>(i) : -1;
  }

 private:
  io_uring ring_{};
  unsigned entries_ = 0;
  bool initialized_ = false;
  uint64_t registered_layout_ = 0;
  bool data_mover_ = false;
  bool tagged_ = false;                     // registered with tags: pieces can be updated
  std::vector<iovec> iovecs_;               // what this ring has registered
  std::vector<uint64_t> piece_generation_;  // parallel to iovecs_
  size_t piece_bytes_ = 1;
};

ThreadRing& CurrentThreadRing() {
  thread_local ThreadRing ring;
  return ring;
}

void LogUringFallbackOnce(int err) {
  static std::once_flag once;
  std::call_once(once, [err] {
    const std::string line = absl::StrFormat("ckpt storage: %s; using pread/pwrite\n",
                                             ErrnoStatus(err, "io_uring_queue_init").message());
    std::fputs(line.c_str(), stderr);
  });
}

class UringEngine : public IoEngine {
 public:
  explicit UringEngine(unsigned queue_depth) : depth_(queue_depth) {}

  std::string_view Name() const override {
    return fell_back_.load(std::memory_order_relaxed) ? "io_uring (some threads pread/pwrite)"
                                                      : "io_uring";
  }

  void PrepareThread() override {
    ThreadRing& thread_ring = CurrentThreadRing();
    thread_ring.set_data_mover();
    if (const int rc = thread_ring.Ensure(depth_); rc < 0) {
      LogUringFallbackOnce(-rc);
      fell_back_.store(true, std::memory_order_relaxed);
      return;
    }
    thread_ring.SyncFixedBuffers();
  }

  absl::Status Run(IoKind kind, absl::Span<EngineOp> ops, std::string_view path) override {
    ThreadRing& thread_ring = CurrentThreadRing();
    if (const int rc = thread_ring.Ensure(depth_); rc < 0) {
      LogUringFallbackOnce(-rc);
      fell_back_.store(true, std::memory_order_relaxed);
      return fallback_.Run(kind, ops, path);
    }
    thread_ring.SyncFixedBuffers();
    return RunOnRing(thread_ring, kind, ops, path);
  }

 private:
  struct OpState {
    bool allow_direct = true;
    bool last_was_direct = false;
  };

  absl::Status RunOnRing(ThreadRing& thread_ring, IoKind kind, absl::Span<EngineOp> ops,
                         std::string_view path) {
    io_uring* ring = thread_ring.ring();
    const char* name = kind == IoKind::kWrite ? "io_uring write" : "io_uring read";
    std::vector<OpState> state(ops.size());
    std::vector<size_t> retry;  // ops with a remainder to resubmit
    size_t next = 0;            // first op never submitted
    unsigned in_flight = 0;
    absl::Status error;  // the first one; stops new submissions

    auto complete = [&](size_t i, int res) {
      EngineOp& op = ops[i];
      OpState& st = state[i];
      if (res < 0) {
        const int err = -res;
        if (err == EINTR || err == EAGAIN) {
          retry.push_back(i);
        } else if (err == EINVAL && st.last_was_direct) {
          st.allow_direct = false;  // see SyncEngine: the page cache still works
          retry.push_back(i);
        } else if (error.ok()) {
          error = TransferError(err, name, path, op.offset + op.done);
        }
        return;
      }
      if (res == 0) {
        if (kind == IoKind::kWrite && error.ok()) {
          error = ZeroWriteError(name, path, op.offset + op.done, op.length - op.done);
        }
        return;  // a read at EOF: the op ends short
      }
      op.done += static_cast<size_t>(res);
      if (op.done < op.length) retry.push_back(i);  // short transfer: the rest
    };

    for (;;) {
      // Fill the queue up to depth_ ops in flight.
      while (error.ok() && in_flight < depth_ && (!retry.empty() || next < ops.size())) {
        size_t i;
        if (!retry.empty()) {
          i = retry.back();
        } else {
          i = next;
          if (ops[i].done >= ops[i].length) {  // nothing to do (zero length)
            ++next;
            continue;
          }
        }
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        if (sqe == nullptr) break;  // SQ full of unsubmitted entries; submit first
        if (!retry.empty()) {
          retry.pop_back();
        } else {
          ++next;
        }
        const Transfer t = NextTransfer(ops[i], state[i].allow_direct);
        state[i].last_was_direct = t.direct;
        const int fixed = thread_ring.FixedIndex(t.buffer, t.length);
        if (fixed >= 0) {
          fixed_transfers.fetch_add(1, std::memory_order_relaxed);
          if (kind == IoKind::kWrite) {
            io_uring_prep_write_fixed(sqe, t.fd, t.buffer, static_cast<unsigned>(t.length),
                                      t.offset, fixed);
          } else {
            io_uring_prep_read_fixed(sqe, t.fd, t.buffer, static_cast<unsigned>(t.length), t.offset,
                                     fixed);
          }
        } else if (kind == IoKind::kWrite) {
          io_uring_prep_write(sqe, t.fd, t.buffer, static_cast<unsigned>(t.length), t.offset);
        } else {
          io_uring_prep_read(sqe, t.fd, t.buffer, static_cast<unsigned>(t.length), t.offset);
        }
        io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(static_cast<uintptr_t>(i)));
        ++in_flight;
      }
      if (in_flight == 0) break;

      // Reap with a minimum completion count: while more work waits, wake
      // after a quarter of the queue drained so the device never idles;
      // otherwise wait for everything in one call.
      const bool more = error.ok() && (!retry.empty() || next < ops.size());
      const unsigned wait_nr = more ? std::min(in_flight, std::max(1u, depth_ / 4)) : in_flight;
      const int rc = io_uring_submit_and_wait(ring, wait_nr);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // The kernel may still own our buffers: wait for every submitted op
        // before returning, one completion at a time.
        if (error.ok()) error = ErrnoStatus(-rc, absl::StrFormat("io_uring_enter for %s", path));
      }
      io_uring_cqe* cqes[64];
      unsigned got;
      while ((got = io_uring_peek_batch_cqe(ring, cqes, 64)) > 0) {
        for (unsigned k = 0; k < got; ++k) {
          --in_flight;
          complete(static_cast<size_t>(reinterpret_cast<uintptr_t>(io_uring_cqe_get_data(cqes[k]))),
                   cqes[k]->res);
        }
        io_uring_cq_advance(ring, got);
      }
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && in_flight > 0) {
        io_uring_cqe* cqe = nullptr;
        const int wrc = io_uring_wait_cqe(ring, &cqe);
        if (wrc < 0 && wrc != -EINTR && wrc != -EAGAIN) {
          // Cannot learn when the kernel is done with the buffers: going on
          // would let it write into memory the caller has reused.
          const std::string line =
              absl::StrFormat("ckpt storage: io_uring unusable with %d ops in flight on %s: %s\n",
                              in_flight, path, ErrnoStatus(-wrc, "io_uring_wait_cqe").message());
          std::fputs(line.c_str(), stderr);
          std::abort();
        }
      }
    }
    return error;
  }

  const unsigned depth_;
  std::atomic<bool> fell_back_{false};
  SyncEngine fallback_;
};

#endif  // CKPT_HAVE_URING

}  // namespace

std::unique_ptr<IoEngine> NewIoEngine(const IoEngineOptions& options) {
  if (!options.use_io_uring) return std::make_unique<SyncEngine>();
#ifdef CKPT_HAVE_URING
  const unsigned depth = std::clamp(options.queue_depth, 1u, kMaxQueueDepth);
  // Probe on this thread (its ring is then ready for use): when the kernel
  // refuses, every thread would be refused, and Name() should say so.
  if (const int rc = CurrentThreadRing().Ensure(depth); rc < 0) {
    LogUringFallbackOnce(-rc);
    return std::make_unique<SyncEngine>();
  }
  return std::make_unique<UringEngine>(depth);
#else
  static std::once_flag once;
  std::call_once(once, [] {
    std::fprintf(stderr, "ckpt storage: built without io_uring; using pread/pwrite\n");
  });
  return std::make_unique<SyncEngine>();
#endif
}

}  // namespace ckpt::storage
