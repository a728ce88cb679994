#include "daemon/gpu/host/host_runtime.h"

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
    return absl::InvalidArgumentError(absl::StrFormat(
        "register host memory: empty range (%u bytes at %p)", bytes, ptr));
  }
  return absl::OkStatus();
}

absl::Status HostRuntime::UnregisterHostMemory(void* ptr) {
  if (ptr == nullptr) {
    return absl::InvalidArgumentError("unregister host memory: null pointer");
  }
  return absl::OkStatus();
}

}  // namespace ckpt::gpu
