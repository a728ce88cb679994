#include "gpu/device_runtime.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "gpu/device_factory.h"
#include "gpu/host/host_runtime.h"
#include "tests/catch.h"

namespace ckpt::gpu {
namespace {

// What every runtime must do; run against the host runtime and against
// whatever DetectDeviceRuntime() finds on this machine (CUDA on a GPU node).
void CheckCommonContract(DeviceRuntime& runtime) {
  INFO(runtime.Name() << ": " << runtime.Describe());
  CHECK((runtime.Name() == "cuda" || runtime.Name() == "host"));
  CHECK_FALSE(runtime.Describe().empty());
  CHECK(runtime.HasDevice() == (runtime.DeviceCount() > 0));

  std::vector<char> buffer(1 << 20, 'x');
  REQUIRE(runtime.RegisterHostMemory(buffer.data(), buffer.size()).ok());
  CHECK(runtime.UnregisterHostMemory(buffer.data()).ok());

  CHECK(runtime.RegisterHostMemory(nullptr, 4096).code() == absl::StatusCode::kInvalidArgument);
  CHECK(runtime.RegisterHostMemory(buffer.data(), 0).code() == absl::StatusCode::kInvalidArgument);
  CHECK(runtime.UnregisterHostMemory(nullptr).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("host runtime has no device and pins nothing", "[gpu_runtime]") {
  std::unique_ptr<DeviceRuntime> runtime = NewHostRuntime();
  REQUIRE(runtime != nullptr);
  CHECK(runtime->Name() == "host");
  CHECK_FALSE(runtime->HasDevice());
  CHECK(runtime->DeviceCount() == 0);
  CHECK(absl::StartsWith(runtime->Describe(), "no GPU: "));

  std::vector<char> buffer(64 << 10);
  CHECK(runtime->RegisterHostMemory(buffer.data(), buffer.size()).ok());
  CHECK(runtime->UnregisterHostMemory(buffer.data()).ok());
  CheckCommonContract(*runtime);
}

TEST_CASE("host runtime reports why there is no GPU", "[gpu_runtime]") {
  HostRuntime runtime("cudaGetDeviceCount: no CUDA device");
  CHECK(runtime.Describe() == "no GPU: cudaGetDeviceCount: no CUDA device");
}

// Every GPU data path of the host runtime: FAILED_PRECONDITION naming the
// operation and carrying Describe()'s reason.
void CheckNoGpuPaths(DeviceRuntime& runtime) {
  const std::string why = runtime.Describe();
  REQUIRE(absl::StartsWith(why, "no GPU: "));
  auto check = [&](const absl::Status& status, absl::string_view operation) {
    INFO(status.ToString());
    CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(absl::StartsWith(status.message(), operation));
    CHECK(absl::EndsWith(status.message(), why));
  };
  std::vector<char> host(1 << 20, 'h');
  std::vector<char> other(1 << 20);
  check(runtime.ExportIpcHandle(host.data()).status(), "export IPC handle of 0x");
  check(runtime.OpenIpcHandle(std::string(64, '\0'), 0, 1 << 20).status(),
        "open IPC handle on device 0");
  int calls = 0;
  check(runtime.CopyDeviceToHost(host.data(), other.data(), host.size(), 4096,
                                 [&](uint64_t, uint64_t) { ++calls; }),
        "copy 1048576 bytes device to host");
  CHECK(calls == 0);
  check(runtime.CopyHostToDevice(host.data(), other.data(), host.size()),
        "copy 1048576 bytes host to device");
}

TEST_CASE("host runtime refuses the GPU data paths with its reason", "[gpu_runtime]") {
  HostRuntime runtime("cudaGetDeviceCount: no CUDA device");
  CheckNoGpuPaths(runtime);
  std::unique_ptr<DeviceRuntime> chosen = NewHostRuntime();
  CheckNoGpuPaths(*chosen);
}

TEST_CASE("DetectDeviceRuntime picks a runtime and says why", "[gpu_runtime]") {
  std::unique_ptr<DeviceRuntime> runtime = DetectDeviceRuntime();
  REQUIRE(runtime != nullptr);
  const std::string description = runtime->Describe();
  INFO("detected " << runtime->Name() << ": " << description);
  CHECK_FALSE(description.empty());
  if (runtime->HasDevice()) {
    CHECK(runtime->Name() == "cuda");
    CHECK(runtime->DeviceCount() >= 1);
    CHECK(absl::StartsWith(description, "CUDA "));
  } else {
    // No device (no driver, driver too old, built without CUDA): the host
    // fallback, carrying the reason.
    CHECK(runtime->Name() == "host");
    CHECK(runtime->DeviceCount() == 0);
    CHECK(absl::StartsWith(description, "no GPU: "));
    CHECK(description.size() > std::string("no GPU: ").size());
    CheckNoGpuPaths(*runtime);
  }
  CheckCommonContract(*runtime);
}

}  // namespace
}  // namespace ckpt::gpu
