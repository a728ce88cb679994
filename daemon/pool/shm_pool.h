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
#include <functional>
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
  // The most of the pool one owner (a job) may hold while others want room:
  // a fraction of the capacity, or 0 for a fair share (capacity divided by
  // the owners holding or waiting for room). An owner that holds nothing may
  // always take what fits, so no owner waits on itself.
  double owner_share = 0;
};

// Who asks, for the per-owner share, and when to stop waiting early.
struct Claim {
  std::string owner;                // empty: not counted against any share
  std::function<bool()> cancelled;  // polled while waiting; true ends the wait
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
  absl::StatusOr<Allocation> Allocate(uint64_t bytes, absl::Time deadline, const Claim& claim = {});
  // What one owner holds now.
  uint64_t OwnerUsed(const std::string& owner) const;
  // Returns an allocation made by Allocate; wakes waiters. Anything else
  // (a double free, a changed offset or length) is a programming error and
  // aborts the process with a message naming the range and the pool.
  void Free(const Allocation& allocation);

  PoolStats Stats() const;

 private:
  ShmPool(std::string path, char* base, uint64_t capacity, uint64_t alignment, double share);
  struct Owner {
    uint64_t used = 0;
    int waiting = 0;
  };
  bool TryAllocateLocked(uint64_t length, const std::string& owner, uint64_t* offset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WithinShareLocked(uint64_t length, const std::string& owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t LargestFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  char* const base_;
  const uint64_t capacity_;
  const uint64_t alignment_;
  const double share_;

  mutable absl::Mutex mu_;
  absl::CondVar freed_;                                     // signalled by Free
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);  // offset -> length, coalesced
  // offset -> (length, owner), to check Free and return the owner's share.
  std::map<uint64_t, std::pair<uint64_t, std::string>> live_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Owner> owners_ ABSL_GUARDED_BY(mu_);  // holding or waiting
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration total_stall_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::pool

#endif  // CKPT_DAEMON_POOL_SHM_POOL_H_
