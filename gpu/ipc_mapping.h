// A device allocation of another process, mapped into this one over CUDA IPC.
//
// Move-only RAII (Mooncake's CudaIpcBufferMapping): the mapping is closed
// (cudaIpcCloseMemHandle) when the object is destroyed, so a copy that holds
// it can never read through a closed mapping. Runtimes make these in
// DeviceRuntime::OpenIpcHandle; this header is CUDA-free, the runtime hands
// in how to close.
//
// Thread-safety: the accessors are safe from any thread; destruction and
// moves need the usual exclusive ownership.
#ifndef CKPT_GPU_IPC_MAPPING_H_
#define CKPT_GPU_IPC_MAPPING_H_

#include <cstdint>

#include "absl/functional/any_invocable.h"

namespace ckpt::gpu {

class IpcMapping {
 public:
  // Called once, from the destructor, with device_ptr and device.
  using Closer = absl::AnyInvocable<void(void* device_ptr, int device)>;

  // device_ptr is the base of the mapped allocation in this process, bytes
  // its size, device the GPU it is mapped on.
  IpcMapping(void* device_ptr, uint64_t bytes, int device, Closer close);
  ~IpcMapping();

  IpcMapping(IpcMapping&& other) noexcept;
  IpcMapping& operator=(IpcMapping&& other) noexcept;
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;

  // Null only in a moved-from mapping.
  void* device_ptr() const { return device_ptr_; }
  uint64_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void Close();

  void* device_ptr_;
  uint64_t bytes_;
  int device_;
  Closer close_;
};

}  // namespace ckpt::gpu

#endif  // CKPT_GPU_IPC_MAPPING_H_
