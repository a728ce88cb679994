#include "client/src/pool_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"

namespace ckpt::client {

absl::StatusOr<std::unique_ptr<PoolMapping>> PoolMapping::Open(const std::string& path,
                                                               uint64_t bytes) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open the daemon's pool ", path));
  // MAP_POPULATE: the page tables are filled once here, not by a fault on
  // every first touch during a save (copies into unfaulted shared memory
  // measured many times slower).
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return ErrnoStatus(err,
                       absl::StrCat("cannot map the daemon's pool ", path, " (", bytes, " bytes)"));
  }
  return std::unique_ptr<PoolMapping>(new PoolMapping(static_cast<char*>(base), bytes));
}

PoolMapping::~PoolMapping() { munmap(base_, size_); }

absl::StatusOr<char*> PoolMapping::Range(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return absl::InternalError(absl::StrCat("daemon lease [", offset, ", +", length,
                                            ") lies outside the pool of ", size_, " bytes"));
  }
  return base_ + offset;
}

}  // namespace ckpt::client
