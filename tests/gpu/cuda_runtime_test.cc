// Pinning, IPC export and mapping, and the chunked device copies through the
// CUDA runtime, checked with the CUDA API itself. Every case needs a GPU:
// without one it skips, saying why ("no GPU: <why>"), so a CPU-only CI stays
// green and ctest shows the test as skipped, not passed.
//
// CUDA refuses to open an IPC handle in the process that exported it, so the
// open is tested across processes: the parent exports, and runs this binary
// again as a child ("cuda ipc child", hidden) that opens the handle, checks
// and rewrites the memory, and writes what it did to a result file.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpu/device_factory.h"
#include "gpu/device_runtime.h"
#include "gpu/ipc_mapping_cache.h"
#include "proto/lib/hex.h"
#include "tests/catch.h"
#include "tests/catch_skip.h"

#ifdef CKPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

extern char** environ;

namespace ckpt::gpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The detected runtime, or null after marking the test case skipped.
std::unique_ptr<DeviceRuntime> RuntimeOrSkip() {
  std::unique_ptr<DeviceRuntime> runtime = DetectDeviceRuntime();
  if (!runtime->HasDevice()) {
    testing::SkipTestCase(runtime->Describe());
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

#ifdef CKPT_HAVE_CUDA

// Deterministic, different in every 4-byte word and per seed, so a chunk
// landing at the wrong offset or a stale byte shows.
std::vector<uint32_t> Pattern(size_t bytes, uint32_t seed) {
  std::vector<uint32_t> words(bytes / sizeof(uint32_t));
  for (size_t i = 0; i < words.size(); ++i) {
    words[i] = static_cast<uint32_t>(i * 2654435761u) ^ (seed * 0x9e3779b9u);
  }
  return words;
}

// cudaMalloc'd memory for a test.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : bytes(n) {
    cudaError_t err = cudaMalloc(&data, n);
    INFO("cudaMalloc: " << cudaGetErrorString(err));
    REQUIRE(err == cudaSuccess);
  }
  ~DeviceBuffer() { (void)cudaFree(data); }
  char* base() const { return static_cast<char*>(data); }
  size_t bytes;
  void* data = nullptr;
};

void FillDevice(void* device_ptr, const std::vector<uint32_t>& words) {
  cudaError_t err =
      cudaMemcpy(device_ptr, words.data(), words.size() * sizeof(uint32_t), cudaMemcpyHostToDevice);
  INFO("cudaMemcpy H2D: " << cudaGetErrorString(err));
  REQUIRE(err == cudaSuccess);
}

bool DeviceEquals(const void* device_ptr, const void* expected, size_t bytes) {
  std::vector<char> back(bytes);
  cudaError_t err = cudaMemcpy(back.data(), device_ptr, bytes, cudaMemcpyDeviceToHost);
  INFO("cudaMemcpy D2H: " << cudaGetErrorString(err));
  REQUIRE(err == cudaSuccess);
  return std::memcmp(back.data(), expected, bytes) == 0;
}

// Pinned host memory, as the staging pool is.
struct PinnedBuffer {
  PinnedBuffer(DeviceRuntime& runtime, size_t n) : runtime(runtime), buffer(n) {
    absl::Status registered = runtime.RegisterHostMemory(buffer.data, n);
    INFO(registered.ToString());
    REQUIRE(registered.ok());
  }
  ~PinnedBuffer() { (void)runtime.UnregisterHostMemory(buffer.data); }
  char* data() const { return static_cast<char*>(buffer.data); }
  DeviceRuntime& runtime;
  AlignedBuffer buffer;
};

struct Chunk {
  uint64_t offset;
  uint64_t length;
};

// Chunks must come in order, back to back, covering [0, bytes).
void CheckChunks(const std::vector<Chunk>& chunks, uint64_t bytes, uint64_t chunk_bytes) {
  REQUIRE(chunks.size() == (bytes + chunk_bytes - 1) / chunk_bytes);
  uint64_t next = 0;
  for (const Chunk& chunk : chunks) {
    CHECK(chunk.offset == next);
    CHECK(chunk.length == std::min(chunk_bytes, bytes - chunk.offset));
    next = chunk.offset + chunk.length;
  }
  CHECK(next == bytes);
}

TEST_CASE("cuda runtime exports the allocation of an inner pointer", "[gpu]") {
  std::unique_ptr<DeviceRuntime> runtime = RuntimeOrSkip();
  if (runtime == nullptr) return;
  INFO(runtime->Describe());

  DeviceBuffer device(64 * kMiB);
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  const uint64_t offset = 3 * kMiB + 256;

  absl::StatusOr<IpcExport> inner = runtime->ExportIpcHandle(device.base() + offset);
  INFO(inner.status().ToString());
  REQUIRE(inner.ok());
  CHECK(inner->offset == offset);
  CHECK(inner->allocation_bytes >= 64 * kMiB);
  CHECK(inner->device == current);
  CHECK(inner->handle.size() == sizeof(cudaIpcMemHandle_t));

  absl::StatusOr<IpcExport> at_base = runtime->ExportIpcHandle(device.data);
  REQUIRE(at_base.ok());
  CHECK(at_base->offset == 0);
  CHECK(at_base->allocation_bytes == inner->allocation_bytes);
  CHECK(at_base->handle == inner->handle);

  // The last byte still belongs to the allocation.
  absl::StatusOr<IpcExport> last = runtime->ExportIpcHandle(device.base() + device.bytes - 1);
  REQUIRE(last.ok());
  CHECK(last->offset == device.bytes - 1);

  CHECK(runtime->ExportIpcHandle(nullptr).status().code() == absl::StatusCode::kInvalidArgument);
  AlignedBuffer host(4096);
  absl::Status not_device = runtime->ExportIpcHandle(host.data).status();
  INFO(not_device.ToString());
  CHECK(not_device.code() == absl::StatusCode::kInvalidArgument);
  CHECK(not_device.message().find("is not device memory") != std::string::npos);

  // Argument checks on the open side, and CUDA's refusal of our own handle.
  CHECK(runtime->OpenIpcHandle("short", current, 64 * kMiB).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(runtime->OpenIpcHandle(inner->handle, runtime->DeviceCount(), 64 * kMiB).status().code() ==
        absl::StatusCode::kInvalidArgument);
  absl::Status own =
      runtime->OpenIpcHandle(inner->handle, current, inner->allocation_bytes).status();
  INFO("opening our own handle: " << own.ToString());
  CHECK_FALSE(own.ok());
}

TEST_CASE("cuda runtime copies device to host in ordered chunks, bit-exact", "[gpu]") {
  std::unique_ptr<DeviceRuntime> runtime = RuntimeOrSkip();
  if (runtime == nullptr) return;
  INFO(runtime->Describe());

  DeviceBuffer device(64 * kMiB);
  const std::vector<uint32_t> pattern = Pattern(device.bytes, 1);
  FillDevice(device.data, pattern);
  PinnedBuffer pinned(*runtime, device.bytes);
  std::memset(pinned.data(), 0, device.bytes);

  const uint64_t chunk_bytes = 4 * kMiB;
  std::vector<Chunk> chunks;
  absl::Status copied = runtime->CopyDeviceToHost(
      device.data, pinned.data(), device.bytes, chunk_bytes, [&](uint64_t offset, uint64_t length) {
        // The chunk has landed when it is reported.
        if (std::memcmp(pinned.data() + offset,
                        reinterpret_cast<const char*>(pattern.data()) + offset, length) != 0) {
          FAIL("chunk at " << offset << " not complete when reported");
        }
        chunks.push_back({offset, length});
      });
  INFO(copied.ToString());
  REQUIRE(copied.ok());
  CheckChunks(chunks, device.bytes, chunk_bytes);
  CHECK(std::memcmp(pinned.data(), pattern.data(), device.bytes) == 0);

  SECTION("an inner range whose size is not a multiple of the chunk") {
    const uint64_t offset = kMiB + 4;
    const uint64_t bytes = 10 * kMiB + 12;
    std::memset(pinned.data(), 0, device.bytes);
    chunks.clear();
    copied = runtime->CopyDeviceToHost(device.base() + offset, pinned.data(), bytes, chunk_bytes,
                                       [&](uint64_t o, uint64_t l) {
                                         chunks.push_back({o, l});
                                       });
    INFO(copied.ToString());
    REQUIRE(copied.ok());
    CheckChunks(chunks, bytes, chunk_bytes);
    CHECK(std::memcmp(pinned.data(), reinterpret_cast<const char*>(pattern.data()) + offset,
                      bytes) == 0);
    CHECK(pinned.data()[bytes] == 0);
  }
  SECTION("zero bytes is a no-op; bad arguments are refused") {
    CHECK(runtime
              ->CopyDeviceToHost(device.data, pinned.data(), 0, chunk_bytes,
                                 [&](uint64_t, uint64_t) { FAIL("called"); })
              .ok());
    CHECK(runtime->CopyDeviceToHost(device.data, pinned.data(), kMiB, 0, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
    CHECK(runtime->CopyDeviceToHost(device.data, nullptr, kMiB, chunk_bytes, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
    absl::Status from_host =
        runtime->CopyDeviceToHost(pinned.data(), pinned.data() + kMiB, kMiB, chunk_bytes, nullptr);
    INFO(from_host.ToString());
    CHECK(from_host.code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("cuda runtime round-trips host to device to host, bit-exact", "[gpu]") {
  std::unique_ptr<DeviceRuntime> runtime = RuntimeOrSkip();
  if (runtime == nullptr) return;
  INFO(runtime->Describe());

  // Not a multiple of the runtime's chunk size.
  const size_t bytes = 64 * kMiB - 4096 - 8;
  DeviceBuffer device(64 * kMiB);
  PinnedBuffer source(*runtime, bytes);
  const std::vector<uint32_t> pattern = Pattern(bytes, 2);
  std::memcpy(source.data(), pattern.data(), bytes);

  absl::Status loaded = runtime->CopyHostToDevice(source.data(), device.data, bytes);
  INFO(loaded.ToString());
  REQUIRE(loaded.ok());
  CHECK(DeviceEquals(device.data, pattern.data(), bytes));

  PinnedBuffer back(*runtime, bytes);
  std::memset(back.data(), 0, bytes);
  REQUIRE(runtime->CopyDeviceToHost(device.data, back.data(), bytes, 4 * kMiB, nullptr).ok());
  CHECK(std::memcmp(back.data(), pattern.data(), bytes) == 0);

  CHECK(runtime->CopyHostToDevice(source.data(), device.data, 0).ok());
  CHECK(runtime->CopyHostToDevice(source.data(), back.data(), kMiB).code() ==
        absl::StatusCode::kInvalidArgument);
}

// The staging pool is registered segment by segment, and CUDA refuses one
// copy whose host side runs from one registration into the next (seen on an
// H200: cudaErrorInvalidValue at the chunk that crossed). The runtime must
// split such chunks; here both directions cross two boundaries between
// three adjacent registrations, with chunks that straddle each and a
// stretch beyond the last registration.
TEST_CASE("cuda runtime copies across adjacent registrations, bit-exact", "[gpu]") {
  std::unique_ptr<DeviceRuntime> runtime = RuntimeOrSkip();
  if (runtime == nullptr) return;
  INFO(runtime->Describe());
  const size_t segment = 6 * kMiB;
  AlignedBuffer host(4 * segment);
  char* base = static_cast<char*>(host.data);
  for (int i = 0; i < 3; ++i) {
    absl::Status registered = runtime->RegisterHostMemory(base + i * segment, segment);
    INFO(registered.ToString());
    REQUIRE(registered.ok());
  }
  // From inside the first registration to beyond the third (unregistered).
  const size_t offset = segment - 3 * kMiB + 4096;
  const size_t bytes = 3 * segment + kMiB;
  DeviceBuffer device(bytes);
  const std::vector<uint32_t> pattern = Pattern(bytes, 7);
  FillDevice(device.data, pattern);

  std::memset(host.data, 0, host.bytes);
  absl::Status pulled =
      runtime->CopyDeviceToHost(device.data, base + offset, bytes, 4 * kMiB, nullptr);
  INFO(pulled.ToString());
  REQUIRE(pulled.ok());
  CHECK(std::memcmp(base + offset, pattern.data(), bytes) == 0);

  const std::vector<uint32_t> reply = Pattern(bytes, 8);
  std::memcpy(base + offset, reply.data(), bytes);
  absl::Status pushed = runtime->CopyHostToDevice(base + offset, device.data, bytes);
  INFO(pushed.ToString());
  REQUIRE(pushed.ok());
  CHECK(DeviceEquals(device.data, reply.data(), bytes));
  for (int i = 0; i < 3; ++i) CHECK(runtime->UnregisterHostMemory(base + i * segment).ok());
}

// The child half of the IPC test: run only by the parent below, which sets
// the environment. Opens the handle (twice through the cache: one open),
// checks the parent's pattern with CopyDeviceToHost, writes a new pattern
// with CopyHostToDevice, and reports in the result file.
TEST_CASE("cuda ipc child", "[.ipc_child]") {
  const char* handle_hex = std::getenv("CKPT_IPC_HANDLE");
  const char* result_path = std::getenv("CKPT_IPC_RESULT");
  if (handle_hex == nullptr || result_path == nullptr) {
    WARN("run by the IPC test only; skipping");
    return;
  }
  int device = -1;
  uint64_t offset = 0;
  uint64_t allocation_bytes = 0;
  uint64_t bytes = 0;
  REQUIRE(absl::SimpleAtoi(std::getenv("CKPT_IPC_DEVICE"), &device));
  REQUIRE(absl::SimpleAtoi(std::getenv("CKPT_IPC_OFFSET"), &offset));
  REQUIRE(absl::SimpleAtoi(std::getenv("CKPT_IPC_ALLOCATION_BYTES"), &allocation_bytes));
  REQUIRE(absl::SimpleAtoi(std::getenv("CKPT_IPC_BYTES"), &bytes));
  const std::optional<std::string> decoded = DecodeHex(handle_hex);
  REQUIRE(decoded.has_value());
  const std::string& handle = *decoded;

  std::unique_ptr<DeviceRuntime> runtime = DetectDeviceRuntime();
  REQUIRE(runtime->HasDevice());
  IpcMappingCache cache(runtime.get());
  absl::StatusOr<std::shared_ptr<IpcMapping>> mapping =
      cache.Get("parent", handle, device, allocation_bytes);
  INFO(mapping.status().ToString());
  REQUIRE(mapping.ok());
  absl::StatusOr<std::shared_ptr<IpcMapping>> again =
      cache.Get("parent", handle, device, allocation_bytes);
  REQUIRE(again.ok());
  REQUIRE(again->get() == mapping->get());
  char* tensor = static_cast<char*>((*mapping)->device_ptr()) + offset;

  PinnedBuffer pinned(*runtime, bytes);
  std::vector<Chunk> chunks;
  absl::Status pulled = runtime->CopyDeviceToHost(tensor, pinned.data(), bytes, 4 * kMiB,
                                                  [&](uint64_t o, uint64_t l) {
                                                    chunks.push_back({o, l});
                                                  });
  INFO(pulled.ToString());
  REQUIRE(pulled.ok());
  CheckChunks(chunks, bytes, 4 * kMiB);
  const std::vector<uint32_t> expected = Pattern(bytes, 3);
  REQUIRE(std::memcmp(pinned.data(), expected.data(), bytes) == 0);

  const std::vector<uint32_t> reply = Pattern(bytes, 4);
  std::memcpy(pinned.data(), reply.data(), bytes);
  absl::Status pushed = runtime->CopyHostToDevice(pinned.data(), tensor, bytes);
  INFO(pushed.ToString());
  REQUIRE(pushed.ok());

  cache.ReleaseOwner("parent");
  mapping->reset();
  again->reset();
  REQUIRE(cache.size() == 0);
  std::ofstream(result_path) << "ok " << bytes << "\n";
}

TEST_CASE("cuda runtime maps another process's allocation over IPC", "[gpu]") {
  std::unique_ptr<DeviceRuntime> runtime = RuntimeOrSkip();
  if (runtime == nullptr) return;
  INFO(runtime->Describe());

  DeviceBuffer device(64 * kMiB);
  const uint64_t offset = 5 * kMiB + 512;
  const uint64_t bytes = 32 * kMiB + 100 * 4;
  FillDevice(device.base() + offset, Pattern(bytes, 3));
  absl::StatusOr<IpcExport> exported = runtime->ExportIpcHandle(device.base() + offset);
  INFO(exported.status().ToString());
  REQUIRE(exported.ok());
  REQUIRE(exported->offset == offset);

  char result_template[] = "/tmp/ckpt_ipc_result_XXXXXX";
  int fd = mkstemp(result_template);
  REQUIRE(fd >= 0);
  close(fd);
  const std::string result_path = result_template;

  // The child is this binary, started afresh (a forked child cannot use
  // the CUDA context it would inherit).
  std::vector<std::string> env_strings = {
      absl::StrCat("CKPT_IPC_HANDLE=", absl::BytesToHexString(exported->handle)),
      absl::StrCat("CKPT_IPC_DEVICE=", exported->device),
      absl::StrCat("CKPT_IPC_OFFSET=", exported->offset),
      absl::StrCat("CKPT_IPC_ALLOCATION_BYTES=", exported->allocation_bytes),
      absl::StrCat("CKPT_IPC_BYTES=", bytes),
      absl::StrCat("CKPT_IPC_RESULT=", result_path),
  };
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string name = "cuda ipc child";
  char* argv[] = {exe.data(), name.data(), nullptr};
  pid_t child = -1;
  REQUIRE(posix_spawn(&child, exe.c_str(), nullptr, nullptr, argv, envp.data()) == 0);
  int wait_status = 0;
  REQUIRE(waitpid(child, &wait_status, 0) == child);

  std::ifstream result_file(result_path);
  std::stringstream result;
  result << result_file.rdbuf();
  std::remove(result_path.c_str());
  INFO("child exit status " << wait_status << ", result '" << result.str() << "'");
  REQUIRE(WIFEXITED(wait_status));
  CHECK(WEXITSTATUS(wait_status) == 0);
  CHECK(result.str() == absl::StrCat("ok ", bytes, "\n"));
  // What the child wrote through its mapping is in our memory.
  const std::vector<uint32_t> reply = Pattern(bytes, 4);
  CHECK(DeviceEquals(device.base() + offset, reply.data(), bytes));
}

#else  // !CKPT_HAVE_CUDA

TEST_CASE("cuda runtime data paths (IPC, chunked copies)", "[gpu]") {
  std::unique_ptr<DeviceRuntime> runtime = RuntimeOrSkip();
  REQUIRE(runtime == nullptr);  // built without CUDA: never a device
}

#endif  // CKPT_HAVE_CUDA

}  // namespace
}  // namespace ckpt::gpu
