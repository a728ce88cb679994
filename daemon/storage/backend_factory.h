// Explicit construction of storage backends: no #ifdef chains at call sites.
#ifndef CKPT_DAEMON_STORAGE_BACKEND_FACTORY_H_
#define CKPT_DAEMON_STORAGE_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/storage/backend.h"
#include "daemon/storage/memory/memory_backend.h"

namespace ckpt::storage {

struct PosixBackendOptions {
  // io_uring with one ring per I/O thread; false selects plain pread/pwrite
  // (also chosen automatically when the kernel refuses io_uring).
  bool use_io_uring = true;
  // O_DIRECT for aligned buffers/offsets/lengths; files or ops that cannot use
  // it (filesystem refuses, unaligned op) go through the page cache instead.
  bool use_o_direct = true;
  unsigned queue_depth = 32;
};

std::unique_ptr<Backend> NewPosixBackend(const PosixBackendOptions& options = {});
std::unique_ptr<Backend> NewMemoryBackend();
std::unique_ptr<Backend> NewMemoryBackend(const MemoryBackendOptions& options);

// "posix" or "memory"; INVALID_ARGUMENT naming the kind otherwise.
absl::StatusOr<std::unique_ptr<Backend>> NewBackend(const std::string& kind,
                                                    const PosixBackendOptions& options = {});

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_BACKEND_FACTORY_H_
