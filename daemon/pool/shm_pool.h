// The daemon's staging memory: one contiguous range, allocated, faulted in
// (and pinned by the GPU layer when a GPU is present) once at start-up,
// then carved into leases. The range is made of segments (memfds,
// segment_memory.h), and a segment serves one owner (a job) at a time: a
// job's ranks map its segments only (SegmentsOf), never another job's
// staged bytes. A segment stays with its owner when freed, so a job that
// saves again reuses the segments its ranks already map; another owner
// takes a wholly free one only when nothing else fits, and then gets it
// with fresh memory (Renew), so the previous owner's mappings show nothing
// of the new owner's bytes.
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
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/pool/segment_memory.h"
#include "proto/lib/segment_handover.h"

namespace ckpt::pool {

struct PoolOptions {
  std::string name = "pool";  // for messages
  uint64_t bytes = 0;
  uint64_t alignment = 4096;  // every allocation's offset and length
  // The most of the pool one owner (a job) may hold while others want room:
  // a fraction of the capacity, or 0 for a fair share (capacity divided by
  // the owners holding or waiting for room). An owner that holds nothing may
  // always take what fits, so no owner waits on itself.
  double owner_share = 0;
  uint64_t segment_bytes = 0;  // 0: DefaultSegmentBytes
  // Around a segment's renewal, with its range: the daemon unpins it from
  // the GPU before and pins it and re-registers io_uring buffers after.
  std::function<void(char*, uint64_t)> before_renew;
  std::function<void(char*, uint64_t)> after_renew;
};

// Who asks, for the per-owner share, and when to stop waiting early.
struct Claim {
  std::string owner;                          // empty: not counted against any share
  std::function<bool()> cancelled = nullptr;  // polled while waiting; true ends the wait
};

struct Allocation {
  uint64_t offset = 0;  // from the start of the pool
  uint64_t length = 0;  // rounded up to the alignment
  // The owner's segment epoch once the allocation was made: it changes
  // whenever the owner gains a segment, so a rank that mapped an older
  // table knows to fetch the new one.
  uint64_t epoch = 0;
};

// An owner's segments, with a duplicate of each descriptor for handing over.
struct OwnerSegments {
  uint64_t epoch = 0;
  std::vector<segments::WireSegment> ranges;
  std::vector<segments::UniqueFd> fds;
};

struct PoolStats {
  uint64_t capacity = 0;
  uint64_t used = 0;
  uint64_t allocations = 0;  // live (allocated and not yet freed)
  int waiters = 0;
  absl::Duration total_stall;  // summed time allocations spent waiting
  uint64_t segments = 0;
  uint64_t segment_renewals = 0;  // segments given fresh memory for a new owner
};

class ShmPool {
 public:
  // Creates the segments, each allocated (a pool that does not fit fails
  // here with a message naming its size, not later with SIGBUS) and mapped
  // with every page touched.
  static absl::StatusOr<std::unique_ptr<ShmPool>> Create(const PoolOptions& options);
  ~ShmPool();
  ShmPool(const ShmPool&) = delete;
  ShmPool& operator=(const ShmPool&) = delete;

  char* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  const std::string& name() const { return name_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t segment_bytes() const { return segment_bytes_; }
  // Every segment's range, for pinning piece by piece (a renewal unpins and
  // pins one segment).
  std::vector<std::pair<char*, uint64_t>> SegmentRanges() const;
  // The segments `owner` holds now and its epoch; an owner with none has an
  // empty table. RESOURCE_EXHAUSTED when the process is out of descriptors.
  absl::StatusOr<OwnerSegments> SegmentsOf(const std::string& owner) const;

  // Rounds bytes up to the alignment (0 becomes one alignment unit). Waits
  // until a contiguous range is free in segments the owner holds or can
  // take, or the deadline passes (RESOURCE_EXHAUSTED, naming the size and
  // pool use). More than the capacity fails at once.
  absl::StatusOr<Allocation> Allocate(uint64_t bytes, absl::Time deadline, const Claim& claim = {});
  // Gives `owner` never-used segments, up to its share of the pool (less
  // what it holds), so its ranks map them once, when they attach, instead
  // of in the middle of the first saves. Takes nothing from other owners.
  void Adopt(const std::string& owner);
  // What one owner holds now.
  uint64_t OwnerUsed(const std::string& owner) const;
  // Returns an allocation made by Allocate; wakes waiters. Anything else
  // (a double free, a changed offset or length) is a programming error and
  // aborts the process with a message naming the range and the pool.
  void Free(const Allocation& allocation);

  PoolStats Stats() const;

 private:
  ShmPool(const PoolOptions& options, std::unique_ptr<SegmentMemory> memory, uint64_t alignment,
          double share);
  struct Owner {
    uint64_t used = 0;
    int waiting = 0;
  };
  // Who a segment serves. `assigned` is false until its first allocation.
  struct SegmentUse {
    bool assigned = false;
    std::string owner;
    uint64_t live = 0;  // bytes of live allocations in it
  };
  // An owner's segment epoch and how many segments it holds.
  struct Holding {
    uint64_t epoch = 0;
    size_t segments = 0;
  };
  // false when nothing fits now; an error when a segment could not be
  // renewed for the owner.
  absl::StatusOr<bool> TryAllocateLocked(uint64_t length, const std::string& owner, Allocation* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first aligned start of `length` bytes in a free range whose
  // segments `owner` may use (its own or never used; with take_others, also
  // another owner's wholly free ones), or false.
  bool FindRangeLocked(uint64_t length, const std::string& owner, bool take_others,
                       uint64_t* start) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool UsableLocked(size_t segment, const std::string& owner, bool take_others) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the segments of [start, start + length) to `owner`, renewing any
  // that served another owner's ranks.
  absl::Status TakeSegmentsLocked(uint64_t start, uint64_t length, const std::string& owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `sign` x the allocation's bytes to the live count of each segment.
  void CountLiveLocked(uint64_t start, uint64_t length, bool add)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WithinShareLocked(uint64_t length, const std::string& owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t LargestFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const std::unique_ptr<SegmentMemory> memory_ ABSL_PT_GUARDED_BY(mu_);
  char* const base_;
  const uint64_t capacity_;
  const uint64_t alignment_;
  const uint64_t segment_bytes_;
  const double share_;
  const std::function<void(char*, uint64_t)> before_renew_;
  const std::function<void(char*, uint64_t)> after_renew_;

  mutable absl::Mutex mu_;
  absl::CondVar freed_;                                     // signalled by Free
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);  // offset -> length, coalesced
  // offset -> (length, owner), to check Free and return the owner's share.
  std::map<uint64_t, std::pair<uint64_t, std::string>> live_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Owner> owners_ ABSL_GUARDED_BY(mu_);  // holding or waiting
  std::vector<SegmentUse> segment_uses_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Holding> holdings_ ABSL_GUARDED_BY(mu_);  // owners holding segments
  uint64_t next_epoch_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration total_stall_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::pool

#endif  // CKPT_DAEMON_POOL_SHM_POOL_H_
