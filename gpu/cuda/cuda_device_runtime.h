// The CUDA device runtime. This header is CUDA-free; only cuda_device_runtime.cc
// includes the CUDA runtime headers, and it is compiled only when
// CKPT_HAVE_CUDA is set. Call sites use DetectDeviceRuntime() instead.
#ifndef CKPT_GPU_CUDA_CUDA_RUNTIME_H_
#define CKPT_GPU_CUDA_CUDA_RUNTIME_H_

#include <memory>

#include "absl/status/statusor.h"
#include "gpu/device_runtime.h"

namespace ckpt::gpu {

// Probes the driver and the devices once. Fails (UNAVAILABLE, with the CUDA
// error text, e.g. "cudaGetDeviceCount: CUDA driver version is insufficient
// for CUDA runtime version (cudaErrorInsufficientDriver)") when no device can
// be used; the caller falls back to the host runtime. The result is
// immutable and safe from any thread.
absl::StatusOr<std::unique_ptr<DeviceRuntime>> NewCudaRuntime();

}  // namespace ckpt::gpu

#endif  // CKPT_GPU_CUDA_CUDA_RUNTIME_H_
