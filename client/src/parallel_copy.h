// Copies many (dst, src, length) pieces with several threads: a host-tensor
// snapshot is memory-bandwidth bound and one core does not saturate it.
#ifndef CKPT_CLIENT_SRC_PARALLEL_COPY_H_
#define CKPT_CLIENT_SRC_PARALLEL_COPY_H_

#include <cstddef>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::client {

struct CopyPiece {
  char* dst;
  const char* src;
  size_t length;
};

// Copies `length` bytes as memcpy does; from kStreamBytes on (x86-64) with
// non-temporal stores, which write the destination without first reading it
// into the cache: a tensor's snapshot or restore is far larger than the
// cache and not read back soon, and so moves a third fewer bytes through
// memory. glibc's memcpy switches to them only past its own threshold (3/4
// of the cache it believes the machine has; 240 MiB on this project's VMs),
// above the pieces a copy is split into.
void CopyBytes(char* dst, const char* src, size_t length);
inline constexpr size_t kStreamBytes = 256 << 10;

// Splits large pieces and copies them on up to `threads` threads (the
// calling thread included); returns when all are done. Starts and joins its
// threads per call: for one-off copies (a benchmark's floor).
void ParallelCopy(const std::vector<CopyPiece>& pieces, int threads);

// A fixed set of copy threads for a client's lifetime, so a job saving every
// step keeps a flat thread count. One copy job at a time: Start hands it
// over and returns, Wait blocks until it is done, so the caller can do
// something else (ask the daemon for the next batch) meanwhile.
//
// Thread-safety: Start and Wait from one thread at a time.
class CopyPool {
 public:
  explicit CopyPool(int threads);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  void Start(std::vector<CopyPiece> pieces);
  void Wait();

 private:
  void Run();

  absl::Mutex mu_;
  std::vector<CopyPiece> units_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  size_t left_ ABSL_GUARDED_BY(mu_) = 0;  // units not yet copied
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ckpt::client

#endif  // CKPT_CLIENT_SRC_PARALLEL_COPY_H_
