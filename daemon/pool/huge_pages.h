// Whether the pool got huge pages. Direct I/O from 4 KiB pages is cut into
// requests of one scatter list (254 pages, about 1 MiB, on virtio-blk);
// from 2 MiB pages a request carries 4 MiB. A disk that serves large
// requests faster (this one: 2.3 against 0.8 GB/s of reads) then loads at
// twice the speed. The kernel gives shared memory huge pages only where
// /sys/kernel/mm/transparent_hugepage/shmem_enabled allows it: "advise"
// (only to memory that asks, as the pool does), "within_size" or "always";
// deploy/ckptd.service sets "advise" where it finds "never".
#ifndef CKPT_DAEMON_POOL_HUGE_PAGES_H_
#define CKPT_DAEMON_POOL_HUGE_PAGES_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ckpt::pool {

inline constexpr const char* kShmemHugeSetting =
    "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

// Shared memory mapped with huge pages by process `pid` (ShmemPmdMapped in
// /proc/<pid>/smaps_rollup); 0 when it cannot be read.
uint64_t ShmemHugePageBytes(pid_t pid);

// The selected word of shmem_enabled ("never", "advise", ...), or "" when
// the file is missing (no transparent huge pages in this kernel).
std::string ShmemHugeSetting();

// What deploy/ckptd.service does, for the life of this object, for a tool or
// test that starts ckptd itself: "never" becomes "advise" (root only), and
// the old setting comes back at the end.
class ScopedShmemHugeAdvise {
 public:
  ScopedShmemHugeAdvise();
  ~ScopedShmemHugeAdvise();
  ScopedShmemHugeAdvise(const ScopedShmemHugeAdvise&) = delete;
  ScopedShmemHugeAdvise& operator=(const ScopedShmemHugeAdvise&) = delete;

  bool changed() const { return changed_; }
  const std::string& old_setting() const { return old_; }

 private:
  const std::string old_;
  bool changed_ = false;
};

}  // namespace ckpt::pool

#endif  // CKPT_DAEMON_POOL_HUGE_PAGES_H_
