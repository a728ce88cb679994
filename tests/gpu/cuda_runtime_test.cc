// Pinning through the CUDA runtime, checked with the CUDA API itself. Every
// case needs a GPU: without one it warns "no GPU: <why>; skipping" and
// passes, so a CPU-only CI stays green but the skip is visible.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "daemon/gpu/device_factory.h"
#include "daemon/gpu/device_runtime.h"

#ifdef CKPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ckpt::gpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The detected runtime, or null after warning why the test is skipped.
std::unique_ptr<DeviceRuntime> RuntimeOrSkip() {
  std::unique_ptr<DeviceRuntime> runtime = DetectDeviceRuntime();
  if (!runtime->HasDevice()) {
    WARN(runtime->Describe() << "; skipping");
    return nullptr;
  }
  return runtime;
}

// A page-aligned buffer; cudaHostRegister does not need the alignment, but
// the staging pool is mmap'ed, so test what it will do.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t n) : bytes(n), data(std::aligned_alloc(4096, n)) {
    std::memset(data, 0x5a, bytes);
  }
  ~AlignedBuffer() { std::free(data); }
  size_t bytes;
  void* data;
};

#ifdef CKPT_HAVE_CUDA
cudaMemoryType MemoryTypeOf(const void* ptr) {
  cudaPointerAttributes attributes{};
  cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  INFO("cudaPointerGetAttributes: " << cudaGetErrorString(err));
  REQUIRE(err == cudaSuccess);
  return attributes.type;
}
#endif

TEST_CASE("cuda runtime pins and unpins 64 MiB of host memory", "[gpu]") {
  std::unique_ptr<DeviceRuntime> runtime = RuntimeOrSkip();
  if (runtime == nullptr) return;
  INFO(runtime->Describe());
  REQUIRE(runtime->Name() == "cuda");

  AlignedBuffer buffer(64 * kMiB);
#ifdef CKPT_HAVE_CUDA
  CHECK(MemoryTypeOf(buffer.data) == cudaMemoryTypeUnregistered);
#endif
  absl::Status registered = runtime->RegisterHostMemory(buffer.data, buffer.bytes);
  INFO(registered.ToString());
  REQUIRE(registered.ok());
#ifdef CKPT_HAVE_CUDA
  {
    cudaPointerAttributes attributes{};
    REQUIRE(cudaPointerGetAttributes(&attributes, buffer.data) == cudaSuccess);
    CHECK(attributes.type == cudaMemoryTypeHost);
    CHECK(attributes.hostPointer == buffer.data);
    CHECK(attributes.devicePointer != nullptr);
    // Inside the range too, not only at its start.
    char* last = static_cast<char*>(buffer.data) + buffer.bytes - 1;
    CHECK(MemoryTypeOf(last) == cudaMemoryTypeHost);
  }
#endif
  REQUIRE(runtime->UnregisterHostMemory(buffer.data).ok());
#ifdef CKPT_HAVE_CUDA
  CHECK(MemoryTypeOf(buffer.data) == cudaMemoryTypeUnregistered);
#endif
}

TEST_CASE("cuda runtime reports misuse of registrations with context", "[gpu]") {
  std::unique_ptr<DeviceRuntime> runtime = RuntimeOrSkip();
  if (runtime == nullptr) return;

  AlignedBuffer buffer(4 * kMiB);
  REQUIRE(runtime->RegisterHostMemory(buffer.data, buffer.bytes).ok());

  absl::Status twice = runtime->RegisterHostMemory(buffer.data, buffer.bytes);
  INFO(twice.ToString());
  CHECK(twice.code() == absl::StatusCode::kAlreadyExists);
  CHECK(twice.message().find("cudaHostRegister of 4.0 MiB at 0x") != std::string::npos);

  REQUIRE(runtime->UnregisterHostMemory(buffer.data).ok());
  absl::Status again = runtime->UnregisterHostMemory(buffer.data);
  INFO(again.ToString());
  CHECK(again.code() == absl::StatusCode::kNotFound);
  CHECK(again.message().find("cudaHostUnregister at 0x") != std::string::npos);

  // The failures above must not leak into later calls.
  CHECK(runtime->RegisterHostMemory(buffer.data, buffer.bytes).ok());
  CHECK(runtime->UnregisterHostMemory(buffer.data).ok());
}

}  // namespace
}  // namespace ckpt::gpu
