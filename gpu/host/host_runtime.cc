#include "gpu/host/host_runtime.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckpt::gpu {

HostRuntime::HostRuntime(std::string why_no_gpu) : why_no_gpu_(std::move(why_no_gpu)) {}

std::string HostRuntime::Describe() const { return absl::StrCat("no GPU: ", why_no_gpu_); }

// Rejects what cudaHostRegister rejects, so such call-site bugs show up on
// machines without a GPU too.
absl::Status HostRuntime::RegisterHostMemory(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("register host memory: empty range (%u bytes at %p)", bytes, ptr));
  }
  return absl::OkStatus();
}

absl::Status HostRuntime::UnregisterHostMemory(void* ptr) {
  if (ptr == nullptr) {
    return absl::InvalidArgumentError("unregister host memory: null pointer");
  }
  return absl::OkStatus();
}

absl::Status HostRuntime::NoGpu(absl::string_view operation) const {
  return absl::FailedPreconditionError(absl::StrCat(operation, ": ", Describe()));
}

absl::StatusOr<IpcExport> HostRuntime::ExportIpcHandle(const void* device_ptr) {
  return NoGpu(absl::StrFormat("export IPC handle of %p", device_ptr));
}

absl::StatusOr<IpcEvent> HostRuntime::RecordIpcEvent(void* stream) {
  return NoGpu(absl::StrFormat("record an IPC event on stream %p", stream));
}

absl::Status HostRuntime::SynchronizeStream(void* stream) {
  return NoGpu(absl::StrFormat("synchronize stream %p", stream));
}

absl::Status HostRuntime::WaitIpcEvent(const std::string& handle, int device) {
  return NoGpu(absl::StrCat("wait for an IPC event on device ", device));
}

absl::StatusOr<std::unique_ptr<IpcMapping>> HostRuntime::OpenIpcHandle(const std::string& handle,
                                                                       int device,
                                                                       uint64_t allocation_bytes) {
  return NoGpu(absl::StrFormat("open IPC handle on device %d", device));
}

absl::Status HostRuntime::CopyDeviceToHost(
    const void* src, void* dst, uint64_t bytes, uint64_t chunk_bytes,
    const std::function<void(uint64_t offset, uint64_t length)>& on_chunk) {
  return NoGpu(absl::StrFormat("copy %u bytes device to host from %p", bytes, src));
}

absl::Status HostRuntime::CopyHostToDevice(const void* src, void* dst, uint64_t bytes) {
  return NoGpu(absl::StrFormat("copy %u bytes host to device to %p", bytes, dst));
}

}  // namespace ckpt::gpu
