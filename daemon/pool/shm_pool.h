// The daemon's staging memory: one shared-memory segment, allocated,
// faulted in (and pinned by the GPU layer when a GPU is present) once at
// start-up, then carved into leases. Clients map the same file and copy
// their tensors into their lease; the daemon writes from there.
//
// Capacity bounds everything in flight: an allocation that does not fit
// waits (the wait is counted as stall) until earlier leases are freed, and
// fails with RESOURCE_EXHAUSTED at its deadline. It never over-commits.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_POOL_SHM_POOL_H_
#define CKPT_DAEMON_POOL_SHM_POOL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ckpt::pool {

struct PoolOptions {
  // The segment's file, normally under /dev/shm; created mode 0600 and
  // removed when the pool is destroyed.
  std::string path;
  uint64_t bytes = 0;
  uint64_t alignment = 4096;  // every allocation's offset and length
};

struct Allocation {
  uint64_t offset = 0;  // from the start of the segment
  uint64_t length = 0;  // rounded up to the alignment
};

struct PoolStats {
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t allocations = 0;  // live (allocated and not yet freed)
  int waiters = 0;
  absl::Duration total_stall;  // summed time allocations spent waiting
};

class ShmPool {
 public:
  // Creates, sizes (posix_fallocate, so a too-small tmpfs fails here with a
  // message naming the path and size, not later with SIGBUS) and maps the
  // segment with every page touched.
  static absl::StatusOr<std::unique_ptr<ShmPool>> Create(const PoolOptions& options);
  ~ShmPool();
  ShmPool(const ShmPool&) = delete;
  ShmPool& operator=(const ShmPool&) = delete;

  char* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  const std::string& path() const { return path_; }
  uint64_t alignment() const { return alignment_; }

  // Rounds bytes up to the alignment (0 becomes one alignment unit). Waits
  // until a contiguous range is free or the deadline passes
  // (RESOURCE_EXHAUSTED, naming the size and pool use). More than the
  // capacity fails at once.
  absl::StatusOr<Allocation> Allocate(uint64_t bytes, absl::Time deadline);
  // Returns an allocation made by Allocate; wakes waiters. Anything else
  // (a double free, a changed offset or length) is a programming error and
  // aborts the process with a message naming the range and the pool.
  void Free(const Allocation& allocation);

  PoolStats Stats() const;

 private:
  ShmPool(std::string path, char* base, uint64_t capacity, uint64_t alignment);
  bool TryAllocateLocked(uint64_t length, uint64_t* offset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t LargestFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  char* const base_;
  const uint64_t capacity_;
  const uint64_t alignment_;

  mutable absl::Mutex mu_;
  absl::CondVar freed_;  // signalled by Free
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);  // offset -> length, coalesced
  std::map<uint64_t, uint64_t> live_ ABSL_GUARDED_BY(mu_);  // offset -> length, to check Free
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration total_stall_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::pool

#endif  // CKPT_DAEMON_POOL_SHM_POOL_H_
