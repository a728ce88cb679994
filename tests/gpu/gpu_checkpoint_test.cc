// GPU tensors through a real ckptd, both ways: saved over CUDA IPC (the
// daemon pulls) and loaded by push, and the reverse; bytes compared after
// the round trip. Without a GPU it skips, saying why, and ctest shows it
// skipped.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ckpt/client.h"
#include "gpu/device_factory.h"
#include "tests/catch.h"
#include "tests/catch_skip.h"
#include "tests/support/test_daemon.h"
#include "tools/demo/tensor_pattern.h"

#if CKPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ckpt::testing {
namespace {

// True with a GPU; otherwise marks the test case skipped, saying why.
bool GpuOrSkip() {
  auto runtime = gpu::DetectDeviceRuntime();
  if (runtime->HasDevice()) return true;
  SkipTestCase(runtime->Describe());
  return false;
}

#if CKPT_HAVE_CUDA
// "" when equal, else where and how the bytes differ.
std::string Mismatch(const std::vector<char>& got, const std::vector<char>& want) {
  size_t first = got.size(), count = 0, zeros = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    first = std::min(first, i);
    ++count;
    zeros += got[i] == 0;
  }
  if (count == 0) return "";
  return absl::StrCat(count, " of ", got.size(), " bytes differ (", zeros,
                      " of them zero), the first at offset ", first);
}
#endif

}  // namespace

TEST_CASE("GPU tensors save and load, pull and push", "[gpu]") {
  if (!GpuOrSkip()) return;
#if CKPT_HAVE_CUDA
  HostTensor t;
  t.fqn = "model.gpu.weight";
  t.dtype = DType::kFloat32;
  // 40 MB: larger than the test daemon's pool segments, so rooms and
  // copies straddle their registrations (registered_ranges.h).
  t.global_shape = {1024, 10000};
  std::vector<char> host = *PatternShard(t);
  void* saved_buffer = nullptr;
  void* loaded_buffer = nullptr;
  REQUIRE(cudaMalloc(&saved_buffer, host.size()) == cudaSuccess);
  REQUIRE(cudaMalloc(&loaded_buffer, host.size()) == cudaSuccess);
  REQUIRE(cudaMemcpy(saved_buffer, host.data(), host.size(), cudaMemcpyHostToDevice) ==
          cudaSuccess);
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
  REQUIRE(cudaMemcpy(back.data(), loaded_buffer, back.size(), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  CHECK(Mismatch(back, host) == "");
  // The step as stored, through host memory: tells a wrong save from a
  // wrong load.
  HostTensor stored = t;
  std::vector<char> on_host(host.size(), 0);
  stored.location = Location::kHost;
  stored.data = on_host.data();
  REQUIRE((*client)->Load(kLatestStep, {stored}).ok());
  CHECK(Mismatch(on_host, host) == "");
  cudaFree(saved_buffer);
  cudaFree(loaded_buffer);
#endif
}

// A Save issued while kernels are still queued on the trainer's stream
// captures the tensor as those kernels leave it, not half-updated: the
// daemon's device copy (pull) waits for an event recorded on the stream at
// Save, and the push path synchronizes the stream first. The stream is kept
// busy with a long queue of memsets of a scratch buffer, then the last op
// writes the tensor's new contents; without the ordering the save would see
// the old (zero) contents.
TEST_CASE("a GPU save waits for the work queued on the caller's stream", "[gpu]") {
  if (!GpuOrSkip()) return;
#if CKPT_HAVE_CUDA
  HostTensor t;
  t.fqn = "model.gpu.updated";
  t.dtype = DType::kFloat32;
  t.global_shape = {2048, 2048};  // 16 MiB
  std::vector<char> expected = *PatternShard(t);
  void* tensor = nullptr;
  void* scratch = nullptr;
  void* pinned = nullptr;
  constexpr size_t kScratch = size_t{1} << 30;
  REQUIRE(cudaMalloc(&tensor, expected.size()) == cudaSuccess);
  REQUIRE(cudaMalloc(&scratch, kScratch) == cudaSuccess);
  REQUIRE(cudaMallocHost(&pinned, expected.size()) == cudaSuccess);
  std::memcpy(pinned, expected.data(), expected.size());
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);

  TestDaemon d;
  REQUIRE(d.Start().ok());
  using Transfer = ClientOptions::GpuTransfer;
  const Transfer transfer = GENERATE(Transfer::kPull, Transfer::kPush);
  ClientOptions options;
  options.socket_path = d.socket();
  options.job = transfer == Transfer::kPull ? "order-pull" : "order-push";
  options.gpu_transfer = transfer;
  auto client = Client::Attach(options);
  REQUIRE(client.ok());

  REQUIRE(cudaMemset(tensor, 0, expected.size()) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  // Some tens of milliseconds of queued work, then the update.
  for (int i = 0; i < 64; ++i) {
    REQUIRE(cudaMemsetAsync(scratch, i, kScratch, stream) == cudaSuccess);
  }
  REQUIRE(cudaMemcpyAsync(tensor, pinned, expected.size(), cudaMemcpyHostToDevice, stream) ==
          cudaSuccess);
  CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);  // the update is still queued
  t.location = Location::kCudaDevice;
  t.data = tensor;
  SaveOptions save;
  save.cuda_stream = stream;
  auto handle = (*client)->Save(1, {t}, {}, save);
  REQUIRE(handle.ok());
  REQUIRE((*handle)->WaitPersisted().ok());
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);

  // Load into host memory and compare with what the stream wrote.
  HostTensor back = t;
  std::vector<char> loaded(expected.size(), 0);
  back.location = Location::kHost;
  back.data = loaded.data();
  auto step = (*client)->Load(1, {back});
  INFO(step.status().ToString());
  REQUIRE(step.ok());
  CHECK(std::memcmp(loaded.data(), expected.data(), expected.size()) == 0);
  cudaStreamDestroy(stream);
  cudaFreeHost(pinned);
  cudaFree(scratch);
  cudaFree(tensor);
#endif
}

}  // namespace ckpt::testing
