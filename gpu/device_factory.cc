#include "gpu/device_factory.h"

#include <memory>
#include <utility>

#include "gpu/host/host_runtime.h"

#ifdef CKPT_HAVE_CUDA
#include "absl/status/statusor.h"
#include "gpu/cuda/cuda_device_runtime.h"
#endif

namespace ckpt::gpu {

std::unique_ptr<DeviceRuntime> DetectDeviceRuntime() {
#ifdef CKPT_HAVE_CUDA
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> cuda = NewCudaRuntime();
  if (cuda.ok()) return *std::move(cuda);
  return std::make_unique<HostRuntime>(std::string(cuda.status().message()));
#else
  return std::make_unique<HostRuntime>("built without CUDA support");
#endif
}

std::unique_ptr<DeviceRuntime> NewHostRuntime() {
  return std::make_unique<HostRuntime>("host runtime selected");
}

}  // namespace ckpt::gpu
