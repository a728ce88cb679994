#include "gpu/ipc_mapping_cache.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/lib/status_context.h"

namespace ckpt::gpu {

IpcMappingCache::IpcMappingCache(DeviceRuntime* runtime) : runtime_(runtime) {}

absl::StatusOr<std::shared_ptr<IpcMapping>> IpcMappingCache::Get(const std::string& owner,
                                                                 const std::string& handle,
                                                                 int device,
                                                                 uint64_t allocation_bytes) {
  absl::MutexLock lock(&mu_);
  Mappings& mappings = by_owner_[owner];
  if (auto it = mappings.find(handle); it != mappings.end()) {
    const IpcMapping& cached = *it->second;
    if (cached.device() != device || cached.bytes() != allocation_bytes) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "IPC mapping for %s: handle already open on device %d with %u bytes, asked for "
          "device %d with %u bytes",
          owner, cached.device(), cached.bytes(), device, allocation_bytes));
    }
    return it->second;
  }
  absl::StatusOr<std::unique_ptr<IpcMapping>> opened =
      runtime_->OpenIpcHandle(handle, device, allocation_bytes);
  if (!opened.ok()) {
    if (mappings.empty()) by_owner_.erase(owner);
    return WithContext(opened.status(), absl::StrCat("IPC mapping for ", owner));
  }
  std::shared_ptr<IpcMapping> mapping = *std::move(opened);
  mappings.emplace(handle, mapping);
  ++size_;
  return mapping;
}

void IpcMappingCache::ReleaseOwner(const std::string& owner) {
  Mappings released;
  {
    absl::MutexLock lock(&mu_);
    auto it = by_owner_.find(owner);
    if (it == by_owner_.end()) return;
    released = std::move(it->second);
    by_owner_.erase(it);
    size_ -= released.size();
  }
  // Closing calls into the driver: outside the lock.
  released.clear();
}

size_t IpcMappingCache::size() const {
  absl::MutexLock lock(&mu_);
  return size_;
}

}  // namespace ckpt::gpu
