#include "daemon/pool/segment_memory.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/pool/human_bytes.h"
#include "proto/lib/status_context.h"

namespace ckpt::pool {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kHugePage = 2 * kMiB;

// MemAvailable in bytes, or 0 when /proc/meminfo does not say.
uint64_t MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace

uint64_t DefaultSegmentBytes(uint64_t capacity, uint64_t alignment) {
  uint64_t bytes = std::max(capacity / 256, std::min(64 * kMiB, capacity / 16));
  bytes = std::max(bytes, alignment);
  return (bytes + alignment - 1) / alignment * alignment;
}

uint64_t SegmentMemory::length(size_t i) const {
  return std::min(segment_bytes_, capacity_ - offset(i));
}

absl::StatusOr<std::unique_ptr<SegmentMemory>> SegmentMemory::Create(const std::string& name,
                                                                     uint64_t capacity,
                                                                     uint64_t segment_bytes) {
  if (capacity == 0 || segment_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": empty pool or segment"));
  }
  if (const uint64_t available = MemAvailable(); available != 0 && capacity > available) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", name, " of ", HumanBytes(capacity), ": only ", HumanBytes(available),
        " of memory available (MemAvailable in /proc/meminfo); lower --pool_bytes"));
  }
  // Address space only: each segment's file is mapped over its piece. On a
  // huge page boundary, so that segments can be backed by huge pages.
  void* reserved = mmap(nullptr, capacity + kHugePage, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) {
    return ErrnoStatus(errno, absl::StrCat("cannot reserve ", HumanBytes(capacity), " for ", name));
  }
  char* const start = static_cast<char*>(reserved);
  char* const base =
      start + (kHugePage - reinterpret_cast<uintptr_t>(start) % kHugePage) % kHugePage;
  if (base > start) munmap(start, static_cast<size_t>(base - start));
  munmap(base + capacity, static_cast<size_t>(start + kHugePage - base));
  std::unique_ptr<SegmentMemory> memory(new SegmentMemory(name, base, capacity, segment_bytes));
  const size_t count = static_cast<size_t>((capacity + segment_bytes - 1) / segment_bytes);
  memory->segments_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    absl::StatusOr<int> fd = memory->Back(memory->base_ + memory->offset(i), memory->length(i), i);
    if (!fd.ok()) return fd.status();
    memory->segments_[i].fd = *fd;
    memory->segments_[i].generation = memory->next_generation_++;
  }
  return memory;
}

SegmentMemory::~SegmentMemory() {
  munmap(base_, capacity_);
  for (const Segment& s : segments_) {
    if (s.fd >= 0) close(s.fd);
  }
}

absl::StatusOr<int> SegmentMemory::Back(char* at, uint64_t length, size_t index) {
  const std::string what = absl::StrCat(name_, " segment ", index, " (", length, " bytes)");
  const int fd =
      memfd_create(absl::StrCat("ckpt-pool-", index).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot create ", what));
  auto fail = [&](int error, const std::string& doing) {
    close(fd);
    return ErrnoStatus(error, absl::StrCat("cannot ", doing, " ", what));
  };
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) return fail(errno, "size");
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return fail(errno, "seal");
  }
  void* mapped = mmap(at, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (mapped == MAP_FAILED) return fail(errno, "map");
  // Huge pages where the kernel allows them for shared memory
  // (transparent_hugepage/shmem_enabled "advise" or "within_size"): direct
  // I/O from 4 KiB pages is cut into requests of one scatter list (254
  // pages, 1 MiB, on virtio), and a disk that is faster with 4 MiB requests
  // (2.3 against 0.8 GB/s read, measured here) then loads at half speed.
  // Refused or ignored elsewhere; 4 KiB pages still work.
  (void)madvise(at, length, MADV_HUGEPAGE);
  // Takes every page now, writable, so a pool that does not fit fails here
  // and not with SIGBUS in the middle of a save, and the first copy into
  // the pool runs at memory speed.
  if (madvise(at, length, MADV_POPULATE_WRITE) != 0) {
    const int error = errno;
    if (error != EINVAL) return fail(error == EFAULT ? ENOMEM : error, "allocate");
    // Before Linux 5.14: allocate the file, then write once per page.
    if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(length)); e != 0) {
      return fail(e, "allocate");
    }
    const long page = sysconf(_SC_PAGESIZE);
    const uint64_t step = page > 0 ? static_cast<uint64_t>(page) : 4096;
    for (uint64_t off = 0; off < length; off += step) {
      // volatile: the store must not be elided; the page is zero already.
      *static_cast<volatile char*>(at + off) = 0;
    }
  }
  return fd;
}

absl::Status SegmentMemory::Renew(size_t i) {
  char* at = base_ + offset(i);
  const uint64_t len = length(i);
  const int old_fd = segments_[i].fd;
  // The segment is wholly free: its old pages go first, so a renewal never
  // needs two segments' worth of memory (the previous owner's ranks, which
  // may still map the old file, see zeros from here on).
  (void)fallocate(old_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(len));
  absl::StatusOr<int> fd = Back(at, len, i);
  if (!fd.ok()) {
    // MAP_FIXED may have dropped the old mapping before failing: put it back.
    if (mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, old_fd, 0) == MAP_FAILED) {
      std::fprintf(stderr, "FATAL: %s: segment %zu lost its memory: %s\n", name_.c_str(), i,
                   std::string(fd.status().message()).c_str());
      std::abort();
    }
    return fd.status();
  }
  close(old_fd);
  segments_[i].fd = *fd;
  segments_[i].generation = next_generation_++;
  ++renewals_;
  return absl::OkStatus();
}

}  // namespace ckpt::pool
