// Device runtime for machines without a usable GPU: reports no device and
// pins nothing, so the staging pool works as plain shared memory. The GPU
// data paths (IPC, device copies) fail with FAILED_PRECONDITION
// "<operation>: no GPU: <why>".
//
// Thread-safety: immutable after construction; safe from any thread.
#ifndef CKPT_GPU_HOST_HOST_RUNTIME_H_
#define CKPT_GPU_HOST_HOST_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "gpu/device_runtime.h"

namespace ckpt::gpu {

class HostRuntime : public DeviceRuntime {
 public:
  // why_no_gpu ends up in Describe() as "no GPU: <why_no_gpu>".
  explicit HostRuntime(std::string why_no_gpu);

  std::string Name() const override { return "host"; }
  bool HasDevice() const override { return false; }
  int DeviceCount() const override { return 0; }
  std::string Describe() const override;
  absl::Status RegisterHostMemory(void* ptr, size_t bytes) override;
  absl::Status UnregisterHostMemory(void* ptr) override;
  absl::StatusOr<IpcExport> ExportIpcHandle(const void* device_ptr) override;
  absl::StatusOr<IpcEvent> RecordIpcEvent(void* stream) override;
  absl::Status SynchronizeStream(void* stream) override;
  absl::Status WaitIpcEvent(const std::string& handle, int device) override;
  absl::StatusOr<std::unique_ptr<IpcMapping>> OpenIpcHandle(const std::string& handle, int device,
                                                            uint64_t allocation_bytes) override;
  absl::Status CopyDeviceToHost(
      const void* src, void* dst, uint64_t bytes, uint64_t chunk_bytes,
      const std::function<void(uint64_t offset, uint64_t length)>& on_chunk) override;
  absl::Status CopyHostToDevice(const void* src, void* dst, uint64_t bytes) override;

 private:
  // FAILED_PRECONDITION "<operation>: no GPU: <why>".
  absl::Status NoGpu(absl::string_view operation) const;

  const std::string why_no_gpu_;
};

}  // namespace ckpt::gpu

#endif  // CKPT_GPU_HOST_HOST_RUNTIME_H_
