// Explicit construction of the device runtime: no #ifdef chains at call sites.
#ifndef CKPT_GPU_DEVICE_FACTORY_H_
#define CKPT_GPU_DEVICE_FACTORY_H_

#include <memory>

#include "gpu/device_runtime.h"

namespace ckpt::gpu {

// The CUDA runtime when it is compiled in (CKPT_HAVE_CUDA) and
// cudaGetDeviceCount reports at least one device; the host runtime otherwise,
// whose Describe() says why there is no GPU (built without CUDA, no driver,
// driver too old, no device). Never null.
std::unique_ptr<DeviceRuntime> DetectDeviceRuntime();

// The host runtime, chosen explicitly (e.g. to bypass the device stage).
std::unique_ptr<DeviceRuntime> NewHostRuntime();

}  // namespace ckpt::gpu

#endif  // CKPT_GPU_DEVICE_FACTORY_H_
