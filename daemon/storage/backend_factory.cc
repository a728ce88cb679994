#include "daemon/storage/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "daemon/storage/memory/memory_backend.h"
#include "daemon/storage/posix/posix_backend.h"

namespace ckpt::storage {

std::unique_ptr<Backend> NewPosixBackend(const PosixBackendOptions& options) {
  return std::make_unique<PosixBackend>(options);
}

std::unique_ptr<Backend> NewMemoryBackend() { return std::make_unique<MemoryBackend>(); }
std::unique_ptr<Backend> NewMemoryBackend(const MemoryBackendOptions& options) {
  return std::make_unique<MemoryBackend>(options);
}

absl::StatusOr<std::unique_ptr<Backend>> NewBackend(const std::string& kind,
                                                    const PosixBackendOptions& options) {
  if (kind == "posix") return NewPosixBackend(options);
  if (kind == "memory") return NewMemoryBackend();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown storage backend \"", kind, "\"; expected \"posix\" or \"memory\""));
}

}  // namespace ckpt::storage
