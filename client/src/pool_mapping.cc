#include "client/src/pool_mapping.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/lib/segment_handover.h"
#include "proto/lib/status_context.h"

namespace ckpt::client {
namespace {

// The daemon answers from memory, without blocking; this only bounds a
// daemon that hangs.
constexpr absl::Duration kFetchTimeout = absl::Seconds(10);

void* Reserve(void* at, uint64_t bytes, bool fixed) {
  return mmap(at, bytes, PROT_NONE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? MAP_FIXED : 0), -1, 0);
}

// A GiB mapped in 4 KiB entries measured 88 ms here, in 2 MiB ones 1 ms.
constexpr uint64_t kHugePage = segments::kHugePageBytes;

// `bytes` of address space starting on a kHugePage boundary.
void* ReserveAligned(uint64_t bytes) {
  if (bytes > UINT64_MAX - kHugePage) return MAP_FAILED;
  void* at = Reserve(nullptr, bytes + kHugePage, /*fixed=*/false);
  if (at == MAP_FAILED) return at;
  const uintptr_t start = reinterpret_cast<uintptr_t>(at);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(at, aligned - start);
  const uintptr_t tail = start + bytes + kHugePage - (aligned + bytes);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PoolMapping>> PoolMapping::Open(const std::string& segment_socket,
                                                               const std::string& session,
                                                               uint64_t pool_bytes, Access access) {
  if (pool_bytes == 0) return absl::InternalError("daemon announced an empty pool");
  void* base = ReserveAligned(pool_bytes);
  if (base == MAP_FAILED) {
    return ErrnoStatus(errno,
                       absl::StrCat("cannot reserve ", pool_bytes, " bytes for the daemon's pool"));
  }
  std::unique_ptr<PoolMapping> mapping(
      new PoolMapping(segment_socket, session, static_cast<char*>(base), pool_bytes, access));
  absl::MutexLock lock(&mapping->mu_);
  if (absl::Status s = mapping->FetchLocked(); !s.ok()) return s;
  return mapping;
}

PoolMapping::~PoolMapping() {
  Unpin();
  munmap(base_, size_);
}

absl::Status PoolMapping::Refresh(uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (epoch <= epoch_) return absl::OkStatus();
  return FetchLocked();
}

void PoolMapping::ReleaseLocked(uint64_t offset, Mapped& mapped) {
  if (mapped.pinned && gpu_ != nullptr) (void)gpu_->UnregisterHostMemory(base_ + offset);
  mapped.pinned = false;
  // Over the old mapping: the address range stays ours, the memory goes.
  (void)Reserve(base_ + offset, mapped.length, /*fixed=*/true);
}

absl::Status PoolMapping::FetchLocked() {
  absl::StatusOr<segments::SegmentTable> table =
      segments::FetchSegmentTable(socket_, session_, size_, kFetchTimeout);
  if (!table.ok()) return WithContext(table.status(), "fetch the job's pool segments");
  const long page = sysconf(_SC_PAGESIZE);
  const uint64_t page_bytes = page > 0 ? static_cast<uint64_t>(page) : 4096;
  std::map<uint64_t, const segments::ReceivedSegment*> wanted;
  uint64_t end = 0;
  for (const segments::ReceivedSegment& s : table->segments) wanted[s.range.offset] = &s;
  for (const auto& [offset, s] : wanted) {
    if (offset % page_bytes != 0 || offset < end) {
      return absl::InternalError(absl::StrCat("daemon sent a misaligned or overlapping segment at ",
                                              offset, " of ", socket_));
    }
    end = offset + s->range.length;
  }
  // Drop what the job no longer holds (or holds in another shape).
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    auto keep = wanted.find(it->first);
    if (keep != wanted.end() && keep->second->range.length == it->second.length &&
        keep->second->range.generation == it->second.generation) {
      ++it;
      continue;
    }
    ReleaseLocked(it->first, it->second);
    it = mapped_.erase(it);
  }
  for (const auto& [offset, s] : wanted) {
    if (mapped_.count(offset) != 0) continue;
    // The pool with MAP_POPULATE: the page tables are filled once here, not
    // by a fault on every first touch during a save (copies into unfaulted
    // shared memory measured many times slower). A load's memory space is
    // not: a rank touches only the files that hold its shards, each of its
    // pages once.
    const bool read_only = access_ == Access::kReadOnly;
    void* at = mmap(base_ + offset, s->range.length, read_only ? PROT_READ : PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_FIXED | (read_only ? 0 : MAP_POPULATE), s->fd.get(), 0);
    if (at == MAP_FAILED) {
      const int error = errno;
      (void)Reserve(base_ + offset, s->range.length, /*fixed=*/true);
      return ErrnoStatus(error, absl::StrCat("cannot map pool segment at ", offset, " (",
                                             s->range.length, " bytes)"));
    }
    Mapped mapped{s->range.length, s->range.generation, false};
    if (gpu_ != nullptr) mapped.pinned = gpu_->RegisterHostMemory(at, mapped.length).ok();
    mapped_.emplace(offset, mapped);
  }
  epoch_ = table->epoch;
  return absl::OkStatus();  // the descriptors close here; the mappings keep the memory
}

absl::StatusOr<char*> PoolMapping::Range(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return absl::InternalError(absl::StrCat("daemon lease [", offset, ", +", length,
                                            ") lies outside the pool of ", size_, " bytes"));
  }
  if (length == 0) return base_ + offset;  // touches nothing
  absl::MutexLock lock(&mu_);
  // Every byte must lie in a segment this job holds: walk them in order.
  uint64_t at = offset;
  const uint64_t end = offset + length;
  auto it = mapped_.upper_bound(at);
  if (it != mapped_.begin()) it = std::prev(it);
  while (at < end) {
    if (it == mapped_.end() || it->first > at || it->first + it->second.length <= at) {
      return absl::InternalError(absl::StrCat("daemon lease [", offset, ", +", length,
                                              ") is not in this job's pool segments"));
    }
    at = it->first + it->second.length;
    ++it;
  }
  return base_ + offset;
}

void PoolMapping::Pin(gpu::DeviceRuntime* gpu) {
  absl::MutexLock lock(&mu_);
  if (gpu_ != nullptr || gpu == nullptr) return;
  gpu_ = gpu;
  for (auto& [offset, mapped] : mapped_) {
    mapped.pinned = gpu_->RegisterHostMemory(base_ + offset, mapped.length).ok();
  }
}

void PoolMapping::Unpin() {
  absl::MutexLock lock(&mu_);
  if (gpu_ == nullptr) return;
  for (auto& [offset, mapped] : mapped_) {
    if (mapped.pinned) (void)gpu_->UnregisterHostMemory(base_ + offset);
    mapped.pinned = false;
  }
  gpu_ = nullptr;
}

}  // namespace ckpt::client
