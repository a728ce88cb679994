// The pool's memory: one contiguous range of the daemon's address space,
// backed piecewise by segments, each its own memfd. One file per segment
// (not one for the pool) is what lets a rank map only its own job's
// memory: the daemon hands a job the descriptors of its segments and
// nothing else. The range stays contiguous for the daemon, so writers,
// readers, io_uring fixed buffers and GPU pinning see a flat pool.
//
// Each memfd is sealed against shrinking and growing: a rank holding the
// descriptor cannot truncate it under the daemon (which would turn the
// daemon's next touch into SIGBUS).
//
// Thread-safety: none; the pool calls it under its lock.
#ifndef CKPT_DAEMON_POOL_SEGMENT_MEMORY_H_
#define CKPT_DAEMON_POOL_SEGMENT_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt::pool {

class SegmentMemory {
 public:
  // RESOURCE_EXHAUSTED when the capacity exceeds the memory available now
  // (MemAvailable): taking it page by page would end in the OOM killer.
  static absl::StatusOr<std::unique_ptr<SegmentMemory>> Create(const std::string& name,
                                                               uint64_t capacity,
                                                               uint64_t segment_bytes);
  ~SegmentMemory();
  SegmentMemory(const SegmentMemory&) = delete;
  SegmentMemory& operator=(const SegmentMemory&) = delete;

  char* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t segment_bytes() const { return segment_bytes_; }
  size_t count() const { return segments_.size(); }
  uint64_t offset(size_t i) const { return i * segment_bytes_; }
  uint64_t length(size_t i) const;
  int fd(size_t i) const { return segments_[i].fd; }
  uint64_t generation(size_t i) const { return segments_[i].generation; }
  uint64_t renewals() const { return renewals_; }

  // Gives segment i fresh memory at the same addresses: the old memfd's
  // pages punched out first (a process that still maps the old file sees
  // zeros, never what the next owner writes), then a new memfd mapped over
  // the range. On failure the segment keeps its old, emptied file. Only for
  // a segment no allocation uses.
  absl::Status Renew(size_t i);

 private:
  struct Segment {
    int fd = -1;
    uint64_t generation = 0;
  };
  SegmentMemory(std::string name, char* base, uint64_t capacity, uint64_t segment_bytes)
      : name_(std::move(name)), base_(base), capacity_(capacity), segment_bytes_(segment_bytes) {}
  // A sealed memfd of `length` bytes mapped at `at`, every page touched.
  absl::StatusOr<int> Back(char* at, uint64_t length, size_t index);

  const std::string name_;
  char* const base_;
  const uint64_t capacity_;
  const uint64_t segment_bytes_;
  std::vector<Segment> segments_;
  uint64_t next_generation_ = 1;
  uint64_t renewals_ = 0;
};

// The segment size for a pool: at least 16 segments (so jobs can share a
// small pool), at most 256 (descriptors), 64 MiB where both allow; a
// multiple of `alignment`.
uint64_t DefaultSegmentBytes(uint64_t capacity, uint64_t alignment);

}  // namespace ckpt::pool

#endif  // CKPT_DAEMON_POOL_SEGMENT_MEMORY_H_
