// Creation protocol (Create):
//   1. open(O_CREAT|O_EXCL, 0600): an existing file is never reused or
//      replaced. It may be the live pool of another ckptd whose clients
//      still map it; a stale file from a crashed daemon is reported with its
//      path so the operator removes it (ALREADY_EXISTS).
//   2. fchmod 0600: the umask may have cleared bits of the requested mode.
//   3. posix_fallocate: reserves every page of the tmpfs now, so a pool that
//      does not fit fails here with RESOURCE_EXHAUSTED instead of a SIGBUS on
//      first touch in the middle of a save. The file is unlinked on failure.
//      A pool larger than the free space is refused before (fstatvfs):
//      tmpfs would take every free page first.
//   4. mmap(MAP_SHARED|MAP_POPULATE), then one write per page: MAP_POPULATE
//      only read-faults a shared mapping; the write makes every PTE
//      writable, so the first copy into the pool runs at memory speed.
// The fd is closed after mmap; clients open the path themselves.
//
// Allocation: first fit over a map of free ranges kept coalesced, so a
// failed first fit means no contiguous range is large enough. Waiters sleep
// on a CondVar that Free signals; there is no FIFO order among waiters.
#include "daemon/pool/shm_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/lib/status_context.h"

namespace ckpt::pool {
namespace {

constexpr uint64_t kMinAlignment = 4096;

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmPool>> ShmPool::Create(const PoolOptions& options) {
  const std::string& path = options.path;
  if (path.empty()) return absl::InvalidArgumentError("shm pool: empty path");
  const uint64_t alignment = options.alignment;
  if (alignment < kMinAlignment || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shm pool ", path, ": alignment ", alignment,
                                                   " must be a power of two >= ", kMinAlignment));
  }
  // A size that is not a multiple of the alignment is rounded down: the tail
  // could never be handed out. capacity() reports the size actually used.
  const uint64_t capacity = options.bytes / alignment * alignment;
  if (capacity == 0) {
    return absl::InvalidArgumentError(absl::StrCat("shm pool ", path, ": size of ", options.bytes,
                                                   " bytes is smaller than the alignment ",
                                                   alignment));
  }

  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int error = errno;
    if (error == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat("cannot create pool ", path,
                       ": file exists (another ckptd running, or a stale file "
                       "from a crashed one: remove it if no ckptd uses it)"));
    }
    return ErrnoStatus(error, absl::StrCat("cannot create pool ", path));
  }
  // From here on, every failure removes the file we created.
  auto fail = [&](absl::Status status) {
    ::close(fd);
    ::unlink(path.c_str());
    return status;
  };
  if (::fchmod(fd, 0600) != 0) {
    const int error = errno;
    return fail(ErrnoStatus(error, absl::StrCat("cannot chmod 0600 pool ", path)));
  }
  // tmpfs's fallocate takes real memory page by page and fails only when
  // the filesystem is full: a pool larger than the free space would first
  // take all of it, and with /dev/shm sized like RAM (as here: 24 GB of 24)
  // that sends the whole machine to the OOM killer before ENOSPC comes back.
  // So a pool that cannot fit is refused before a page is taken; fallocate
  // below still catches what changes in between.
  struct statvfs fs {};
  if (::fstatvfs(fd, &fs) == 0 && fs.f_frsize > 0 &&
      static_cast<uint64_t>(fs.f_bavail) < capacity / fs.f_frsize) {
    const absl::Status s = ErrnoStatus(
        ENOSPC, absl::StrCat("cannot allocate pool of ", HumanBytes(capacity), " at ", path));
    return fail(absl::Status(
        s.code(), absl::StrCat(s.message(), " (",
                               HumanBytes(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize),
                               " free; is the filesystem large enough? see `df -h ", path, "`)")));
  }
  if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(capacity)); error != 0) {
    const absl::Status s = ErrnoStatus(
        error, absl::StrCat("cannot allocate pool of ", HumanBytes(capacity), " at ", path));
    if (error == ENOSPC || error == EFBIG) {
      // The usual cause, and the one the operator can fix: say how to check.
      return fail(absl::Status(
          s.code(),
          absl::StrCat(s.message(), " (is the filesystem large enough? see `df -h ", path, "`)")));
    }
    return fail(s);
  }
  void* addr = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr == MAP_FAILED) {
    const int error = errno;
    return fail(ErrnoStatus(
        error, absl::StrCat("cannot map pool of ", HumanBytes(capacity), " at ", path)));
  }
  ::close(fd);

  char* base = static_cast<char*>(addr);
  const long page = sysconf(_SC_PAGESIZE);
  const uint64_t step = page > 0 ? static_cast<uint64_t>(page) : kMinAlignment;
  for (uint64_t off = 0; off < capacity; off += step) {
    // volatile: the store must not be elided; the page is zero already.
    *static_cast<volatile char*>(base + off) = 0;
  }
  return std::unique_ptr<ShmPool>(
      new ShmPool(path, base, capacity, alignment, std::clamp(options.owner_share, 0.0, 1.0)));
}

ShmPool::ShmPool(std::string path, char* base, uint64_t capacity, uint64_t alignment, double share)
    : path_(std::move(path)),
      base_(base),
      capacity_(capacity),
      alignment_(alignment),
      share_(share) {
  absl::MutexLock lock(&mu_);
  free_.emplace(0, capacity_);
}

ShmPool::~ShmPool() {
  ::munmap(base_, capacity_);
  // Clients that still map the segment keep their mapping; the name goes.
  ::unlink(path_.c_str());
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

bool ShmPool::TryAllocateLocked(uint64_t length, const std::string& owner, uint64_t* offset) {
  if (!WithinShareLocked(length, owner)) return false;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < length) continue;
    const uint64_t start = it->first;
    const uint64_t rest = it->second - length;
    free_.erase(it);
    if (rest > 0) free_.emplace(start + length, rest);
    live_.emplace(start, std::make_pair(length, owner));
    used_ += length;
    if (!owner.empty()) owners_[owner].used += length;
    *offset = start;
    return true;
  }
  return false;
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
        absl::StrCat("pool ", path_, ": request of ", bytes, " bytes (", HumanBytes(bytes),
                     ") exceeds the pool capacity ", capacity_, " (", HumanBytes(capacity_), ")"));
  }
  const uint64_t length =
      bytes == 0 ? alignment_ : (bytes + alignment_ - 1) / alignment_ * alignment_;

  absl::MutexLock lock(&mu_);
  uint64_t offset = 0;
  if (TryAllocateLocked(length, claim.owner, &offset)) return Allocation{offset, length};

  const absl::Time start = absl::Now();
  ++waiters_;
  if (!claim.owner.empty()) ++owners_[claim.owner].waiting;
  bool ok = false;
  bool cancelled = false;
  for (;;) {
    // Woken by Free; polled too when the caller can be cancelled (a rank
    // died), so a dead save never sits on the queue until its deadline.
    const absl::Time wake =
        claim.cancelled ? std::min(deadline, absl::Now() + absl::Milliseconds(50)) : deadline;
    freed_.WaitWithDeadline(&mu_, wake);
    ok = TryAllocateLocked(length, claim.owner, &offset);
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
  if (ok) return Allocation{offset, length};
  if (cancelled) {
    return absl::CancelledError(absl::StrCat("pool ", path_, ": wait for ", HumanBytes(length),
                                             " abandoned after ", absl::FormatDuration(waited)));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "pool ", path_, ": cannot allocate ", HumanBytes(length), " (", length,
      " bytes): ", HumanBytes(used_), " of ", HumanBytes(capacity_), " in use, largest free range ",
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
                 static_cast<unsigned long long>(allocation.length), path_.c_str(),
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
  return stats;
}

}  // namespace ckpt::pool
