#include "gpu/cuda/cuda_device_runtime.h"

// cuda.h for the driver API's types only: its functions are reached through
// cudaGetDriverEntryPointByVersion, never linked, because linking libcuda
// puts libcuda.so.1 in the binary's needed libraries and the daemon would
// then not even start on a machine without a driver (the host fallback).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "gpu/registered_ranges.h"
#include "proto/lib/status_context.h"

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
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
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
  return absl::StrCat(names.size(),
                      names.size() == 1 ? " device: " : " devices: ", absl::StrJoin(groups, ", "));
}

// Streams a copy call spreads its chunks over, per device; chunks of a call
// in flight at once (each with its event). Four streams keep both copy
// engines busy and leave room for concurrent calls; eight chunks of 4 MiB
// hide the per-chunk completion latency.
constexpr int kStreamsPerDevice = 4;
constexpr int kChunksInFlight = 8;
// CopyHostToDevice has no per-chunk consumer; chunks only spread the copy.
constexpr uint64_t kLoadChunkBytes = uint64_t{4} << 20;

// The driver API functions the runtime API lacks.
using MemGetAddressRangeFn = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr ptr);
using GetErrorStringFn = CUresult (*)(CUresult error, const char** text);

struct DriverApi {
  MemGetAddressRangeFn mem_get_address_range = nullptr;
  GetErrorStringFn get_error_string = nullptr;
};

// Null when the driver does not offer the symbol; the caller says so.
void* DriverSymbol(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return fn;
}

// The allocation [base, base + size) that holds ptr, in the current context.
absl::Status AddressRange(const DriverApi& driver, const void* ptr, uintptr_t* base,
                          uint64_t* size) {
  if (driver.mem_get_address_range == nullptr) {
    return absl::UnavailableError(
        absl::StrFormat("cuMemGetAddressRange of %p: the driver does not offer it", ptr));
  }
  CUdeviceptr range_base = 0;
  size_t range_size = 0;
  CUresult result =
      driver.mem_get_address_range(&range_base, &range_size, reinterpret_cast<CUdeviceptr>(ptr));
  if (result != CUDA_SUCCESS) {
    const char* text = nullptr;
    if (driver.get_error_string == nullptr ||
        driver.get_error_string(result, &text) != CUDA_SUCCESS || text == nullptr) {
      text = "unknown error";
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "cuMemGetAddressRange of %p: %s (CUresult %d)", ptr, text, static_cast<int>(result)));
  }
  *base = static_cast<uintptr_t>(range_base);
  *size = range_size;
  return absl::OkStatus();
}

// Makes a device current for the scope and restores the caller's, since the
// current device is per-thread state the caller may rely on.
class ScopedDevice {
 public:
  ScopedDevice() {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
  }
  ~ScopedDevice() {
    if (previous_ >= 0 && previous_ != current_) (void)cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  absl::Status Set(int device) {
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) return CudaError(err, absl::StrCat("cudaSetDevice(", device, ")"));
    current_ = device;
    return absl::OkStatus();
  }

 private:
  int previous_ = -1;
  int current_ = -1;
};

// The device whose memory ptr is; INVALID_ARGUMENT for host memory.
// Managed memory is accepted only where allow_managed (it cannot be exported).
absl::StatusOr<int> DeviceOf(const void* ptr, bool allow_managed, absl::string_view what) {
  cudaPointerAttributes attributes{};
  cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  if (err != cudaSuccess) {
    return CudaError(err, absl::StrFormat("%s: cudaPointerGetAttributes(%p)", what, ptr));
  }
  if (attributes.type == cudaMemoryTypeDevice ||
      (allow_managed && attributes.type == cudaMemoryTypeManaged)) {
    return attributes.device;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %p is not device memory (cudaMemoryType %d)", what, ptr,
                      static_cast<int>(attributes.type)));
}

void CloseIpcMapping(void* device_ptr, int device) {
  ScopedDevice scoped;
  absl::Status set = scoped.Set(device);
  cudaError_t err = set.ok() ? cudaIpcCloseMemHandle(device_ptr) : cudaSuccess;
  if (!set.ok() || err != cudaSuccess) {
    // A destructor cannot return it; a leaked mapping is only address space.
    std::string why(set.ok() ? CudaError(err, "cudaIpcCloseMemHandle").message() : set.message());
    std::fprintf(stderr, "ckpt gpu: closing the IPC mapping at %p on device %d: %s\n", device_ptr,
                 device, why.c_str());
  }
}

// Events of one copy call, one per chunk in flight.
class EventRing {
 public:
  EventRing() = default;
  ~EventRing() {
    for (cudaEvent_t event : events_) (void)cudaEventDestroy(event);
  }
  EventRing(const EventRing&) = delete;
  EventRing& operator=(const EventRing&) = delete;

  absl::Status Create(int count) {
    for (int i = 0; i < count; ++i) {
      cudaEvent_t event = nullptr;
      cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
      if (err != cudaSuccess) return CudaError(err, "cudaEventCreateWithFlags");
      events_.push_back(event);
    }
    return absl::OkStatus();
  }
  cudaEvent_t operator[](uint64_t chunk) const { return events_[chunk % events_.size()]; }

 private:
  std::vector<cudaEvent_t> events_;
};

class CudaRuntime : public DeviceRuntime {
 public:
  CudaRuntime(int device_count, std::string description, DriverApi driver)
      : device_count_(device_count),
        description_(std::move(description)),
        driver_(driver),
        streams_(device_count) {}

  ~CudaRuntime() override {
    for (auto& [device, event] : ipc_events_) {
      if (event != nullptr) (void)cudaEventDestroy(event);
    }
    for (const std::unique_ptr<DeviceStreams>& device : streams_) {
      if (device == nullptr) continue;
      for (cudaStream_t stream : device->streams) (void)cudaStreamDestroy(stream);
    }
  }

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
    ProcessRegistrations().Add(reinterpret_cast<uintptr_t>(ptr), bytes);
    return absl::OkStatus();
  }

  absl::Status UnregisterHostMemory(void* ptr) override {
    const std::string context = absl::StrFormat("cudaHostUnregister at %p", ptr);
    if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(context, ": null pointer"));
    cudaError_t err = cudaHostUnregister(ptr);
    if (err != cudaSuccess) return CudaError(err, context);
    ProcessRegistrations().Remove(reinterpret_cast<uintptr_t>(ptr));
    return absl::OkStatus();
  }

  absl::StatusOr<IpcExport> ExportIpcHandle(const void* device_ptr) override {
    const std::string context = absl::StrFormat("export IPC handle of %p", device_ptr);
    if (device_ptr == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": null pointer"));
    }
    absl::StatusOr<int> device = DeviceOf(device_ptr, /*allow_managed=*/false, context);
    if (!device.ok()) return device.status();
    ScopedDevice scoped;
    if (absl::Status set = scoped.Set(*device); !set.ok()) return WithContext(set, context);

    // IPC exports whole allocations: find the one that holds the pointer.
    uintptr_t base = 0;
    uint64_t size = 0;
    if (absl::Status range = AddressRange(driver_, device_ptr, &base, &size); !range.ok()) {
      return WithContext(range, context);
    }
    cudaIpcMemHandle_t handle;
    cudaError_t err = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));
    if (err != cudaSuccess) {
      return CudaError(
          err, absl::StrFormat("%s: cudaIpcGetMemHandle of its allocation at %#x", context, base));
    }
    IpcExport out;
    out.handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
    out.offset = reinterpret_cast<uintptr_t>(device_ptr) - base;
    out.allocation_bytes = size;
    out.device = *device;
    return out;
  }

  absl::StatusOr<IpcEvent> RecordIpcEvent(void* stream) override {
    const std::string context = absl::StrFormat("record an IPC event on stream %p", stream);
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return CudaError(err, absl::StrCat(context, ": cudaGetDevice"));
    absl::MutexLock lock(&events_mu_);
    cudaEvent_t& event = ipc_events_[device];
    if (event == nullptr) {
      err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess);
      if (err != cudaSuccess) {
        event = nullptr;
        return CudaError(err, absl::StrCat(context, ": cudaEventCreateWithFlags"));
      }
    }
    err = cudaEventRecord(event, static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) return CudaError(err, absl::StrCat(context, ": cudaEventRecord"));
    cudaIpcEventHandle_t handle;
    err = cudaIpcGetEventHandle(&handle, event);
    if (err != cudaSuccess) return CudaError(err, absl::StrCat(context, ": cudaIpcGetEventHandle"));
    IpcEvent out;
    out.handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
    out.device = device;
    return out;
  }

  absl::Status SynchronizeStream(void* stream) override {
    cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    if (err != cudaSuccess) {
      return CudaError(err, absl::StrFormat("cudaStreamSynchronize(%p)", stream));
    }
    return absl::OkStatus();
  }

  absl::Status WaitIpcEvent(const std::string& handle, int device) override {
    const std::string context = absl::StrCat("wait for an IPC event on device ", device);
    if (handle.size() != sizeof(cudaIpcEventHandle_t)) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": the handle has ", handle.size(),
                                                     " bytes, not ", sizeof(cudaIpcEventHandle_t)));
    }
    if (device < 0 || device >= device_count_) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": no such device (", device_count_, " present)"));
    }
    ScopedDevice scoped;
    if (absl::Status set = scoped.Set(device); !set.ok()) return WithContext(set, context);
    cudaIpcEventHandle_t ipc;
    std::memcpy(&ipc, handle.data(), sizeof(ipc));
    cudaEvent_t event = nullptr;
    cudaError_t err = cudaIpcOpenEventHandle(&event, ipc);
    if (err != cudaSuccess)
      return CudaError(err, absl::StrCat(context, ": cudaIpcOpenEventHandle"));
    err = cudaEventSynchronize(event);
    (void)cudaEventDestroy(event);
    if (err != cudaSuccess) return CudaError(err, absl::StrCat(context, ": cudaEventSynchronize"));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<IpcMapping>> OpenIpcHandle(const std::string& handle, int device,
                                                            uint64_t allocation_bytes) override {
    const std::string context = absl::StrFormat("open IPC handle of %s on device %d",
                                                FormatBytes(allocation_bytes), device);
    if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: handle is %u bytes, not %u", context,
                                                        handle.size(), sizeof(cudaIpcMemHandle_t)));
    }
    if (device < 0 || device >= device_count_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: no such device (%d devices)", context, device_count_));
    }
    if (allocation_bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": empty allocation"));
    }
    ScopedDevice scoped;
    if (absl::Status set = scoped.Set(device); !set.ok()) return WithContext(set, context);
    cudaIpcMemHandle_t ipc_handle;
    std::memcpy(&ipc_handle, handle.data(), sizeof(ipc_handle));
    void* ptr = nullptr;
    // Lazy peer access: the exporter's device may differ from ours (a rank
    // on GPU 1 read through GPU 0's daemon thread) and peers are enabled
    // only where such a mapping needs them.
    cudaError_t err = cudaIpcOpenMemHandle(&ptr, ipc_handle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      return CudaError(err, absl::StrCat(context, ": cudaIpcOpenMemHandle"));
    }
    auto mapping = std::make_unique<IpcMapping>(ptr, allocation_bytes, device, &CloseIpcMapping);
    // A handle of a smaller allocation than the rank claims would let a
    // copy run past its end.
    uintptr_t base = 0;
    uint64_t size = 0;
    if (absl::Status range = AddressRange(driver_, ptr, &base, &size); !range.ok()) {
      return WithContext(range, context);
    }
    if (size < allocation_bytes) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: the mapped allocation is only %s", context, FormatBytes(size)));
    }
    return mapping;
  }

  absl::Status CopyDeviceToHost(
      const void* src, void* dst, uint64_t bytes, uint64_t chunk_bytes,
      const std::function<void(uint64_t offset, uint64_t length)>& on_chunk) override {
    const std::string context =
        absl::StrFormat("copy %s device to host from %p to %p", FormatBytes(bytes), src, dst);
    if (bytes == 0) return absl::OkStatus();
    if (src == nullptr || dst == nullptr || chunk_bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: null pointer or zero chunk size (%u)", context, chunk_bytes));
    }
    absl::StatusOr<int> device = DeviceOf(src, /*allow_managed=*/true, context);
    if (!device.ok()) return device.status();
    return CopyChunked(context, cudaMemcpyDeviceToHost, *device, src, dst, bytes, chunk_bytes,
                       on_chunk);
  }

  absl::Status CopyHostToDevice(const void* src, void* dst, uint64_t bytes) override {
    const std::string context =
        absl::StrFormat("copy %s host to device from %p to %p", FormatBytes(bytes), src, dst);
    if (bytes == 0) return absl::OkStatus();
    if (src == nullptr || dst == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": null pointer"));
    }
    absl::StatusOr<int> device = DeviceOf(dst, /*allow_managed=*/true, context);
    if (!device.ok()) return device.status();
    return CopyChunked(context, cudaMemcpyHostToDevice, *device, src, dst, bytes, kLoadChunkBytes,
                       nullptr);
  }

 private:
  struct DeviceStreams {
    std::vector<cudaStream_t> streams;
    // Where the next call starts, so concurrent calls spread out.
    std::atomic<uint32_t> next{0};
  };

  // The device's streams, created on first use (not in NewCudaRuntime: that
  // would create a context, and its memory, on every GPU of the node).
  // Call with device current.
  absl::StatusOr<DeviceStreams*> StreamsFor(int device) {
    absl::MutexLock lock(&streams_mu_);
    std::unique_ptr<DeviceStreams>& slot = streams_[device];
    if (slot != nullptr) return slot.get();
    auto created = std::make_unique<DeviceStreams>();
    for (int i = 0; i < kStreamsPerDevice; ++i) {
      cudaStream_t stream = nullptr;
      // Non-blocking: the copies must not serialize with the legacy default
      // stream, which other libraries in the process may use.
      cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      if (err != cudaSuccess) {
        for (cudaStream_t made : created->streams) (void)cudaStreamDestroy(made);
        return CudaError(err, absl::StrFormat("cudaStreamCreateWithFlags on device %d", device));
      }
      created->streams.push_back(stream);
    }
    slot = std::move(created);
    return slot.get();
  }

  // Chunk i goes to stream (start + i) % kStreamsPerDevice and records event
  // i % kChunksInFlight; completions are awaited in chunk order, so on_chunk
  // sees offsets in order while up to kChunksInFlight - 1 later chunks copy.
  absl::Status CopyChunked(const std::string& context, cudaMemcpyKind kind, int device,
                           const void* src, void* dst, uint64_t bytes, uint64_t chunk_bytes,
                           const std::function<void(uint64_t, uint64_t)>& on_chunk) {
    ScopedDevice scoped;
    if (absl::Status set = scoped.Set(device); !set.ok()) return WithContext(set, context);
    absl::StatusOr<DeviceStreams*> streams = StreamsFor(device);
    if (!streams.ok()) return WithContext(streams.status(), context);
    const std::vector<cudaStream_t>& stream = (*streams)->streams;
    const uint32_t start = (*streams)->next.fetch_add(1, std::memory_order_relaxed);

    const uint64_t chunks = (bytes + chunk_bytes - 1) / chunk_bytes;
    EventRing events;
    if (absl::Status made =
            events.Create(static_cast<int>(std::min<uint64_t>(chunks, kChunksInFlight)));
        !made.ok()) {
      return WithContext(made, context);
    }
    auto range_of = [&](uint64_t chunk) {
      const uint64_t offset = chunk * chunk_bytes;
      return std::make_pair(offset, std::min(chunk_bytes, bytes - offset));
    };
    auto chunk_error = [&](cudaError_t err, uint64_t chunk, absl::string_view call) {
      auto [offset, length] = range_of(chunk);
      return CudaError(err, absl::StrFormat("%s, chunk %u of %u (%s at offset %u): %s", context,
                                            chunk + 1, chunks, FormatBytes(length), offset, call));
    };

    uint64_t issued = 0;
    uint64_t landed = 0;
    absl::Status status;
    // Keeps kChunksInFlight chunks issued (or all that are left).
    auto top_up = [&]() {
      while (status.ok() && issued < chunks && issued - landed < kChunksInFlight) {
        auto [offset, length] = range_of(issued);
        cudaStream_t s = stream[(start + issued) % stream.size()];
        // One copy per registration the host side touches (registered_ranges.h).
        const uintptr_t host = reinterpret_cast<uintptr_t>(
            kind == cudaMemcpyDeviceToHost ? static_cast<const char*>(dst) : src);
        cudaError_t err = cudaSuccess;
        for (uint64_t done = 0; done < length && err == cudaSuccess;) {
          const uint64_t piece =
              ProcessRegistrations().PieceAt(host + offset + done, length - done);
          err = cudaMemcpyAsync(static_cast<char*>(dst) + offset + done,
                                static_cast<const char*>(src) + offset + done, piece, kind, s);
          done += piece;
        }
        if (err != cudaSuccess) {
          status = chunk_error(err, issued, "cudaMemcpyAsync");
          return;
        }
        if ((err = cudaEventRecord(events[issued], s)) != cudaSuccess) {
          // The copy is queued without its event: wait for it on its stream.
          (void)cudaStreamSynchronize(s);
          status = chunk_error(err, issued, "cudaEventRecord");
          return;
        }
        ++issued;
      }
    };

    top_up();
    while (status.ok() && landed < issued) {
      cudaError_t err = cudaEventSynchronize(events[landed]);
      if (err != cudaSuccess) {
        status = chunk_error(err, landed, "cudaEventSynchronize");
        break;
      }
      auto [offset, length] = range_of(landed);
      ++landed;
      // Queue the next copy before handing this chunk over, so the copy
      // engine is not idle while the caller works.
      top_up();
      if (on_chunk) on_chunk(offset, length);
    }
    // After an error, wait for every copy already issued: the caller may
    // free or reuse dst as soon as this returns.
    for (uint64_t chunk = landed; chunk < issued; ++chunk) {
      (void)cudaEventSynchronize(events[chunk]);
    }
    if (!status.ok()) (void)cudaGetLastError();
    return status;
  }

  const int device_count_;
  const std::string description_;
  const DriverApi driver_;
  absl::Mutex streams_mu_;
  // One slot per device, filled on first use; the streams then live as
  // long as the runtime.
  std::vector<std::unique_ptr<DeviceStreams>> streams_ ABSL_GUARDED_BY(streams_mu_);
  absl::Mutex events_mu_;
  std::map<int, cudaEvent_t> ipc_events_ ABSL_GUARDED_BY(events_mu_);  // by device
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
  // Missing symbols only disable IPC export and the open size check, which
  // then say so; copies do not need them.
  DriverApi driver;
  driver.mem_get_address_range =
      reinterpret_cast<MemGetAddressRangeFn>(DriverSymbol("cuMemGetAddressRange"));
  driver.get_error_string = reinterpret_cast<GetErrorStringFn>(DriverSymbol("cuGetErrorString"));
  return std::make_unique<CudaRuntime>(
      count,
      absl::StrCat("CUDA ", FormatVersion(runtime_version), " (driver ",
                   FormatVersion(driver_version), "), ", DescribeDevices(names)),
      driver);
}

}  // namespace ckpt::gpu
