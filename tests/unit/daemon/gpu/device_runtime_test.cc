#include "daemon/gpu/device_runtime.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "daemon/gpu/device_factory.h"
#include "daemon/gpu/host/host_runtime.h"

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

  CHECK(runtime.RegisterHostMemory(nullptr, 4096).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(runtime.RegisterHostMemory(buffer.data(), 0).code() ==
        absl::StatusCode::kInvalidArgument);
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
  }
  CheckCommonContract(*runtime);
}

}  // namespace
}  // namespace ckpt::gpu
