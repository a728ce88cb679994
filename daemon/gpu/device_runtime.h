// The GPU as the daemon sees it: what is there, and pinning of host memory
// (the staging pool) so that device copies run at full PCIe/NVLink speed.
//
// Two implementations, picked at run time by DetectDeviceRuntime()
// (device_factory.h): CUDA (cuda/, the only code that includes CUDA headers)
// when it is compiled in and a device answers, and a host runtime (host/)
// otherwise, which pins nothing and keeps the daemon and its tests working on
// machines without a GPU or driver. One binary serves both.
//
// Thread-safety: all methods are safe from any thread. Registering a range
// and unregistering it are the caller's pairing: a range is registered once
// and unregistered once, with no copies into it in flight.
#ifndef CKPT_DAEMON_GPU_DEVICE_RUNTIME_H_
#define CKPT_DAEMON_GPU_DEVICE_RUNTIME_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace ckpt::gpu {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // "cuda" or "host".
  virtual std::string Name() const = 0;
  // True when at least one GPU can be used; the host runtime says false.
  virtual bool HasDevice() const = 0;
  virtual int DeviceCount() const = 0;
  // One line for logs and status pages, e.g.
  // "CUDA 13.0 (driver 13.0), 1 device: NVIDIA H100 80GB HBM3" or
  // "no GPU: cudaGetDeviceCount: CUDA driver version is insufficient ...".
  virtual std::string Describe() const = 0;

  // Page-locks [ptr, ptr + bytes) for every device (CUDA: cudaHostRegister
  // with cudaHostRegisterPortable); the host runtime does nothing. Both
  // reject a null ptr or zero bytes (INVALID_ARGUMENT). CUDA errors:
  // ALREADY_EXISTS if part of the range is registered, RESOURCE_EXHAUSTED if
  // the memory cannot be locked, others as reported by the runtime.
  virtual absl::Status RegisterHostMemory(void* ptr, size_t bytes) = 0;
  // Undoes RegisterHostMemory; ptr is the start of a registered range.
  // Both reject a null ptr; CUDA: NOT_FOUND if ptr is not registered.
  virtual absl::Status UnregisterHostMemory(void* ptr) = 0;
};

}  // namespace ckpt::gpu

#endif  // CKPT_DAEMON_GPU_DEVICE_RUNTIME_H_
