#include "daemon/gpu/cuda/cuda_device_runtime.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace ckpt::gpu {
namespace {

std::string FormatBytes(size_t bytes) {
  constexpr double kKiB = 1024.0;
  if (bytes >= kKiB * kKiB * kKiB) return absl::StrFormat("%.1f GiB", bytes / (kKiB * kKiB * kKiB));
  if (bytes >= kKiB * kKiB) return absl::StrFormat("%.1f MiB", bytes / (kKiB * kKiB));
  if (bytes >= kKiB) return absl::StrFormat("%.1f KiB", bytes / kKiB);
  return absl::StrFormat("%u bytes", bytes);
}

// 13000 -> "13.0"
std::string FormatVersion(int version) {
  return absl::StrFormat("%d.%d", version / 1000, (version % 1000) / 10);
}

absl::StatusCode CodeOf(cudaError_t err) {
  switch (err) {
    case cudaErrorInvalidValue:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorHostMemoryAlreadyRegistered:
      return absl::StatusCode::kAlreadyExists;
    case cudaErrorHostMemoryNotRegistered:
      return absl::StatusCode::kNotFound;
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::StatusCode::kUnavailable;
    case cudaErrorNotSupported:
    case cudaErrorNotPermitted:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

// "<context>: <text> (<name>)". Also clears the thread's last-error slot, so
// a failed call (e.g. an already registered range) does not surface again
// from an unrelated later call; sticky errors stay, as CUDA intends.
absl::Status CudaError(cudaError_t err, absl::string_view context) {
  (void)cudaGetLastError();
  return absl::Status(CodeOf(err), absl::StrCat(context, ": ", cudaGetErrorString(err), " (",
                                                cudaGetErrorName(err), ")"));
}

// "1 device: NVIDIA H100 80GB HBM3", "8 devices: 8x NVIDIA H100 80GB HBM3",
// "2 devices: NVIDIA A100-SXM4-40GB, NVIDIA H100 80GB HBM3"
std::string DescribeDevices(const std::vector<std::string>& names) {
  std::vector<std::string> groups;
  for (size_t i = 0; i < names.size();) {
    size_t j = i;
    while (j < names.size() && names[j] == names[i]) ++j;
    groups.push_back(j - i == 1 ? names[i] : absl::StrCat(j - i, "x ", names[i]));
    i = j;
  }
  return absl::StrCat(names.size(), names.size() == 1 ? " device: " : " devices: ",
                      absl::StrJoin(groups, ", "));
}

class CudaRuntime : public DeviceRuntime {
 public:
  CudaRuntime(int device_count, std::string description)
      : device_count_(device_count), description_(std::move(description)) {}

  std::string Name() const override { return "cuda"; }
  bool HasDevice() const override { return device_count_ > 0; }
  int DeviceCount() const override { return device_count_; }
  std::string Describe() const override { return description_; }

  absl::Status RegisterHostMemory(void* ptr, size_t bytes) override {
    const std::string context =
        absl::StrFormat("cudaHostRegister of %s at %p", FormatBytes(bytes), ptr);
    if (ptr == nullptr || bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": empty range"));
    }
    // Portable: pinned for every device's context, not only the current one,
    // since one daemon serves all GPUs of the node.
    cudaError_t err = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
    if (err != cudaSuccess) return CudaError(err, context);
    return absl::OkStatus();
  }

  absl::Status UnregisterHostMemory(void* ptr) override {
    const std::string context = absl::StrFormat("cudaHostUnregister at %p", ptr);
    if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(context, ": null pointer"));
    cudaError_t err = cudaHostUnregister(ptr);
    if (err != cudaSuccess) return CudaError(err, context);
    return absl::OkStatus();
  }

 private:
  const int device_count_;
  const std::string description_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceRuntime>> NewCudaRuntime() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Whatever CodeOf says, "no usable GPU" is one condition for the caller.
    return absl::UnavailableError(CudaError(err, "cudaGetDeviceCount").message());
  }
  if (count < 1) return absl::UnavailableError("cudaGetDeviceCount: no CUDA device");

  int runtime_version = 0;
  int driver_version = 0;
  if ((err = cudaRuntimeGetVersion(&runtime_version)) != cudaSuccess) {
    return absl::UnavailableError(CudaError(err, "cudaRuntimeGetVersion").message());
  }
  if ((err = cudaDriverGetVersion(&driver_version)) != cudaSuccess) {
    return absl::UnavailableError(CudaError(err, "cudaDriverGetVersion").message());
  }
  std::vector<std::string> names;
  for (int device = 0; device < count; ++device) {
    cudaDeviceProp prop;
    if ((err = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
      return absl::UnavailableError(
          CudaError(err, absl::StrCat("cudaGetDeviceProperties(", device, ")")).message());
    }
    names.emplace_back(prop.name);
  }
  return std::make_unique<CudaRuntime>(
      count, absl::StrCat("CUDA ", FormatVersion(runtime_version), " (driver ",
                          FormatVersion(driver_version), "), ", DescribeDevices(names)));
}

}  // namespace ckpt::gpu
