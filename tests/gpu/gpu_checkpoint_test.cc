// GPU tensors through a real ckptd, both ways: saved over CUDA IPC (the
// daemon pulls) and loaded by push, and the reverse; bytes compared after
// the round trip. Without a GPU it skips, saying why, and ctest shows it
// skipped.
#include <catch2/catch.hpp>
#include <cstring>

#include "ckpt/client.h"
#include "daemon/gpu/device_factory.h"
#include "tests/catch_skip.h"
#include "tests/support/test_daemon.h"
#include "tools/demo/tensor_pattern.h"

#if CKPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ckpt::testing {

TEST_CASE("GPU tensors save and load, pull and push", "[gpu]") {
  auto runtime = gpu::DetectDeviceRuntime();
  if (!runtime->HasDevice()) {
    SkipTestCase(runtime->Describe());
    return;
  }
#if CKPT_HAVE_CUDA
  HostTensor t;
  t.fqn = "model.gpu.weight";
  t.dtype = DType::kFloat32;
  t.global_shape = {1024, 2048};  // 8 MiB
  std::vector<char> host = *PatternShard(t);
  void* saved_buffer = nullptr;
  void* loaded_buffer = nullptr;
  REQUIRE(cudaMalloc(&saved_buffer, host.size()) == cudaSuccess);
  REQUIRE(cudaMalloc(&loaded_buffer, host.size()) == cudaSuccess);
  REQUIRE(cudaMemcpy(saved_buffer, host.data(), host.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  t.location = Location::kCudaDevice;

  TestDaemon d;
  REQUIRE(d.Start().ok());
  using Transfer = ClientOptions::GpuTransfer;
  const auto [save_with, load_with] = GENERATE(std::make_pair(Transfer::kPull, Transfer::kPush),
                                               std::make_pair(Transfer::kPush, Transfer::kPull));
  ClientOptions options;
  options.socket_path = d.socket();
  options.job = save_with == Transfer::kPull ? "pull-push" : "push-pull";
  options.gpu_transfer = save_with;
  {
    auto client = Client::Attach(options);
    REQUIRE(client.ok());
    t.data = saved_buffer;
    auto handle = (*client)->Save(1, {t}, {});
    REQUIRE(handle.ok());
    REQUIRE((*handle)->WaitPersisted().ok());
  }
  options.gpu_transfer = load_with;
  auto client = Client::Attach(options);
  REQUIRE(client.ok());
  REQUIRE(cudaMemset(loaded_buffer, 0, host.size()) == cudaSuccess);
  t.data = loaded_buffer;
  auto step = (*client)->Load(kLatestStep, {t});
  INFO(step.status().ToString());
  REQUIRE(step.ok());
  std::vector<char> back(host.size());
  REQUIRE(cudaMemcpy(back.data(), loaded_buffer, back.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::memcmp(back.data(), host.data(), host.size()) == 0);
  cudaFree(saved_buffer);
  cudaFree(loaded_buffer);
#endif
}

}  // namespace ckpt::testing
