// Allocation: first fit over a map of free ranges kept coalesced, limited
// to the segments the owner may use (segment_memory.h): its own and never
// used ones first, then, only when nothing fits there, wholly free segments
// of other owners, which are renewed before the owner gets them. Waiters
// sleep on a CondVar that Free signals; there is no FIFO order among
// waiters.
#include "daemon/pool/shm_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <utility>

#include <fcntl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/pool/human_bytes.h"
#include "proto/lib/status_context.h"

namespace ckpt::pool {
namespace {

constexpr uint64_t kMinAlignment = 4096;

}  // namespace

absl::StatusOr<std::unique_ptr<ShmPool>> ShmPool::Create(const PoolOptions& options) {
  const std::string& name = options.name;
  const uint64_t alignment = options.alignment;
  if (alignment < kMinAlignment || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": alignment ", alignment,
                                                   " must be a power of two >= ", kMinAlignment));
  }
  // A size that is not a multiple of the alignment is rounded down: the tail
  // could never be handed out. capacity() reports the size actually used.
  const uint64_t capacity = options.bytes / alignment * alignment;
  if (capacity == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": size of ", options.bytes, " bytes is smaller than the alignment ", alignment));
  }
  uint64_t segment_bytes = options.segment_bytes == 0
                               ? DefaultSegmentBytes(capacity, alignment)
                               : (options.segment_bytes + alignment - 1) / alignment * alignment;
  segment_bytes = std::min(segment_bytes, capacity);
  // Each segment is a descriptor in ckptd and, during a fetch, in every
  // rank: more than 1024 would not fit a process's default limit.
  if (const uint64_t count = (capacity + segment_bytes - 1) / segment_bytes; count > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", count, " segments of ",
                                                   segment_bytes,
                                                   " bytes; at most 1024 (each is a file "
                                                   "descriptor): raise --pool_segment_bytes"));
  }
  absl::StatusOr<std::unique_ptr<SegmentMemory>> memory =
      SegmentMemory::Create(name, capacity, segment_bytes);
  if (!memory.ok()) return memory.status();
  return std::unique_ptr<ShmPool>(new ShmPool(options, std::move(*memory), alignment,
                                              std::clamp(options.owner_share, 0.0, 1.0)));
}

ShmPool::ShmPool(const PoolOptions& options, std::unique_ptr<SegmentMemory> memory,
                 uint64_t alignment, double share)
    : name_(options.name),
      memory_(std::move(memory)),
      base_(memory_->base()),
      capacity_(memory_->capacity()),
      alignment_(alignment),
      segment_bytes_(memory_->segment_bytes()),
      share_(share),
      before_renew_(options.before_renew),
      after_renew_(options.after_renew) {
  absl::MutexLock lock(&mu_);
  free_.emplace(0, capacity_);
  segment_uses_.resize(memory_->count());
}

// Clients that still map segments keep their mappings; the memory goes
// when the last of them unmaps.
ShmPool::~ShmPool() = default;

std::vector<std::pair<char*, uint64_t>> ShmPool::SegmentRanges() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<char*, uint64_t>> ranges;
  for (size_t i = 0; i < memory_->count(); ++i) {
    ranges.emplace_back(base_ + memory_->offset(i), memory_->length(i));
  }
  return ranges;
}

absl::StatusOr<OwnerSegments> ShmPool::SegmentsOf(const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  OwnerSegments out;
  auto holding = holdings_.find(owner);
  if (holding == holdings_.end()) return out;
  out.epoch = holding->second.epoch;
  for (size_t i = 0; i < segment_uses_.size(); ++i) {
    const SegmentUse& use = segment_uses_[i];
    if (!use.assigned || use.owner != owner) continue;
    // A duplicate: the segment may be renewed (its descriptor closed) while
    // this one is on its way to the rank.
    const int fd = fcntl(memory_->fd(i), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      return ErrnoStatus(errno, absl::StrCat(name_, ": cannot duplicate segment ", i));
    }
    out.fds.emplace_back(fd);
    out.ranges.push_back({memory_->offset(i), memory_->length(i), memory_->generation(i)});
  }
  return out;
}

bool ShmPool::WithinShareLocked(uint64_t length, const std::string& owner) const {
  if (owner.empty()) return true;
  auto it = owners_.find(owner);
  const uint64_t held = it == owners_.end() ? 0 : it->second.used;
  if (held == 0) return true;
  uint64_t cap = 0;
  if (share_ > 0) {
    cap = static_cast<uint64_t>(static_cast<double>(capacity_) * share_);
  } else {
    size_t active = 0;
    for (const auto& [name, o] : owners_) active += (o.used > 0 || o.waiting > 0) ? 1 : 0;
    cap = capacity_ / std::max<size_t>(active, 1);
  }
  return held + length <= cap;
}

bool ShmPool::UsableLocked(size_t segment, const std::string& owner, bool take_others) const {
  const SegmentUse& use = segment_uses_[segment];
  if (!use.assigned || use.owner == owner) return true;
  return take_others && use.live == 0;
}

bool ShmPool::FindRangeLocked(uint64_t length, const std::string& owner, bool take_others,
                              uint64_t* start) const {
  for (const auto& [free_start, free_length] : free_) {
    if (free_length < length) continue;
    const uint64_t free_end = free_start + free_length;
    uint64_t at = free_start;
    while (at + length <= free_end) {
      // The last segment of [at, at + length) the owner may not use: any
      // start before its end would still overlap it.
      const size_t first = static_cast<size_t>(at / segment_bytes_);
      const size_t last = static_cast<size_t>((at + length - 1) / segment_bytes_);
      size_t blocked = last + 1;
      for (size_t k = last + 1; k-- > first;) {
        if (!UsableLocked(k, owner, take_others)) {
          blocked = k;
          break;
        }
      }
      if (blocked > last) {
        *start = at;
        return true;
      }
      at = (static_cast<uint64_t>(blocked) + 1) * segment_bytes_;
    }
  }
  return false;
}

absl::Status ShmPool::TakeSegmentsLocked(uint64_t start, uint64_t length,
                                         const std::string& owner) {
  const size_t first = static_cast<size_t>(start / segment_bytes_);
  const size_t last = static_cast<size_t>((start + length - 1) / segment_bytes_);
  bool gained = false;
  for (size_t k = first; k <= last; ++k) {
    SegmentUse& use = segment_uses_[k];
    if (use.assigned && use.owner == owner) continue;
    // A segment another job's ranks were handed gets fresh memory: they may
    // still map the old one. One only the daemon used ("") needs none.
    if (use.assigned && !use.owner.empty()) {
      char* at = base_ + memory_->offset(k);
      const uint64_t bytes = memory_->length(k);
      if (before_renew_) before_renew_(at, bytes);
      const absl::Status renewed = memory_->Renew(k);
      if (after_renew_) after_renew_(at, bytes);
      if (!renewed.ok()) {
        // Segments taken before this one are the owner's now, with fresh
        // memory: its ranks must learn of them before any lease there, or
        // they would copy into their stale mappings.
        if (gained) holdings_[owner].epoch = next_epoch_++;
        return renewed;
      }
    }
    if (use.assigned) {
      auto previous = holdings_.find(use.owner);
      if (--previous->second.segments == 0) holdings_.erase(previous);
    }
    use.assigned = true;
    use.owner = owner;
    ++holdings_[owner].segments;
    gained = true;
  }
  if (gained) holdings_[owner].epoch = next_epoch_++;
  return absl::OkStatus();
}

void ShmPool::CountLiveLocked(uint64_t start, uint64_t length, bool add) {
  const uint64_t end = start + length;
  for (size_t k = static_cast<size_t>(start / segment_bytes_);
       k < segment_uses_.size() && memory_->offset(k) < end; ++k) {
    const uint64_t from = std::max(start, memory_->offset(k));
    const uint64_t to = std::min(end, memory_->offset(k) + memory_->length(k));
    if (add) {
      segment_uses_[k].live += to - from;
    } else {
      segment_uses_[k].live -= to - from;
    }
  }
}

void ShmPool::Adopt(const std::string& owner) {
  absl::MutexLock lock(&mu_);
  auto held = holdings_.find(owner);
  const size_t holding = held == holdings_.end() ? 0 : held->second.segments;
  const size_t owners = holdings_.size() + (held == holdings_.end() ? 1 : 0);
  const uint64_t share = share_ > 0 ? static_cast<uint64_t>(static_cast<double>(capacity_) * share_)
                                    : capacity_ / owners;
  uint64_t room = share > holding * segment_bytes_ ? share - holding * segment_bytes_ : 0;
  bool gained = false;
  for (size_t k = 0; k < segment_uses_.size() && room >= memory_->length(k); ++k) {
    SegmentUse& use = segment_uses_[k];
    if (use.assigned) continue;
    use.assigned = true;
    use.owner = owner;
    ++holdings_[owner].segments;
    room -= memory_->length(k);
    gained = true;
  }
  if (gained) holdings_[owner].epoch = next_epoch_++;
}

absl::StatusOr<bool> ShmPool::TryAllocateLocked(uint64_t length, const std::string& owner,
                                                Allocation* out) {
  if (!WithinShareLocked(length, owner)) return false;
  uint64_t start = 0;
  if (!FindRangeLocked(length, owner, /*take_others=*/false, &start) &&
      !FindRangeLocked(length, owner, /*take_others=*/true, &start)) {
    return false;
  }
  if (absl::Status s = TakeSegmentsLocked(start, length, owner); !s.ok()) return s;
  auto it = std::prev(free_.upper_bound(start));
  const uint64_t free_start = it->first;
  const uint64_t free_end = it->first + it->second;
  free_.erase(it);
  if (start > free_start) free_.emplace(free_start, start - free_start);
  if (start + length < free_end) free_.emplace(start + length, free_end - start - length);
  live_.emplace(start, std::make_pair(length, owner));
  CountLiveLocked(start, length, /*add=*/true);
  used_ += length;
  if (!owner.empty()) owners_[owner].used += length;
  *out = Allocation{start, length, holdings_[owner].epoch};
  return true;
}

uint64_t ShmPool::OwnerUsed(const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second.used;
}

uint64_t ShmPool::LargestFreeLocked() const {
  uint64_t largest = 0;
  for (const auto& [offset, length] : free_) largest = std::max(largest, length);
  return largest;
}

absl::StatusOr<Allocation> ShmPool::Allocate(uint64_t bytes, absl::Time deadline,
                                             const Claim& claim) {
  // Compared before rounding so that a huge request cannot overflow.
  if (bytes > capacity_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": request of ", bytes, " bytes (", HumanBytes(bytes),
                     ") exceeds the pool capacity ", capacity_, " (", HumanBytes(capacity_), ")"));
  }
  const uint64_t length =
      bytes == 0 ? alignment_ : (bytes + alignment_ - 1) / alignment_ * alignment_;

  absl::MutexLock lock(&mu_);
  Allocation allocation;
  absl::StatusOr<bool> fitted = TryAllocateLocked(length, claim.owner, &allocation);
  if (!fitted.ok()) return fitted.status();
  if (*fitted) return allocation;

  const absl::Time start = absl::Now();
  ++waiters_;
  if (!claim.owner.empty()) ++owners_[claim.owner].waiting;
  bool ok = false;
  bool cancelled = false;
  absl::Status error;
  for (;;) {
    // Woken by Free; polled too when the caller can be cancelled (a rank
    // died), so a dead save never sits on the queue until its deadline.
    const absl::Time wake =
        claim.cancelled ? std::min(deadline, absl::Now() + absl::Milliseconds(50)) : deadline;
    freed_.WaitWithDeadline(&mu_, wake);
    fitted = TryAllocateLocked(length, claim.owner, &allocation);
    if (!fitted.ok()) {
      error = fitted.status();
      break;
    }
    ok = *fitted;
    if (ok || absl::Now() >= deadline) break;
    if (claim.cancelled && claim.cancelled()) {
      cancelled = true;
      break;
    }
  }
  --waiters_;
  if (!claim.owner.empty()) {
    Owner& o = owners_[claim.owner];
    --o.waiting;
    if (o.used == 0 && o.waiting == 0) owners_.erase(claim.owner);
  }
  // Others may have been held back by this owner's share while it waited.
  if (!ok && waiters_ > 0) freed_.SignalAll();
  const absl::Duration waited = absl::Now() - start;
  total_stall_ += waited;
  if (ok) return allocation;
  if (!error.ok()) return error;
  if (cancelled) {
    return absl::CancelledError(absl::StrCat(name_, ": wait for ", HumanBytes(length),
                                             " abandoned after ", absl::FormatDuration(waited)));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      name_, ": cannot allocate ", HumanBytes(length), " (", length, " bytes): ", HumanBytes(used_),
      " of ", HumanBytes(capacity_), " in use, largest free range ",
      HumanBytes(LargestFreeLocked()), ", after waiting ", absl::FormatDuration(waited)));
}

void ShmPool::Free(const Allocation& allocation) {
  absl::MutexLock lock(&mu_);
  auto live = live_.find(allocation.offset);
  if (live == live_.end() || live->second.first != allocation.length) {
    // A programming error: continuing would hand the range out twice.
    std::fprintf(stderr,
                 "FATAL: ShmPool::Free(offset=%llu, length=%llu) on pool %s: not a live "
                 "allocation (%s)\n",
                 static_cast<unsigned long long>(allocation.offset),
                 static_cast<unsigned long long>(allocation.length), name_.c_str(),
                 live == live_.end()
                     ? "double free or an offset Allocate did not return"
                     : absl::StrCat("allocated length is ", live->second.first).c_str());
    std::fflush(stderr);
    std::abort();
  }
  if (!live->second.second.empty()) {
    auto owner = owners_.find(live->second.second);
    owner->second.used -= allocation.length;
    if (owner->second.used == 0 && owner->second.waiting == 0) owners_.erase(owner);
  }
  live_.erase(live);
  CountLiveLocked(allocation.offset, allocation.length, /*add=*/false);
  used_ -= allocation.length;

  uint64_t start = allocation.offset;
  uint64_t length = allocation.length;
  auto next = free_.lower_bound(start);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && start + length == next->first) {
    length += next->second;
    free_.erase(next);
  }
  free_.emplace(start, length);
  // Waiters want different sizes: wake them all, each retries first fit.
  if (waiters_ > 0) freed_.SignalAll();
}

PoolStats ShmPool::Stats() const {
  absl::MutexLock lock(&mu_);
  PoolStats stats;
  stats.capacity = capacity_;
  stats.used = used_;
  stats.allocations = live_.size();
  stats.waiters = waiters_;
  stats.total_stall = total_stall_;
  stats.segments = memory_->count();
  stats.segment_renewals = memory_->renewals();
  return stats;
}

}  // namespace ckpt::pool
