// Device runtime for machines without a usable GPU: reports no device and
// pins nothing, so the staging pool works as plain shared memory.
//
// Thread-safety: immutable after construction; safe from any thread.
#ifndef CKPT_DAEMON_GPU_HOST_HOST_RUNTIME_H_
#define CKPT_DAEMON_GPU_HOST_HOST_RUNTIME_H_

#include <string>

#include "daemon/gpu/device_runtime.h"

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

 private:
  const std::string why_no_gpu_;
};

}  // namespace ckpt::gpu

#endif  // CKPT_DAEMON_GPU_HOST_HOST_RUNTIME_H_
