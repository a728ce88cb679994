// The GPU as the daemon sees it: what is there, pinning of host memory (the
// staging pool) so that device copies run at full PCIe/NVLink speed, CUDA IPC
// (a rank exports its tensors' allocations, the daemon maps them), and the
// chunked copies of the save (D2H, docs/design.md 4.3) and load (H2D, 5) paths.
//
// Two implementations, picked at run time by DetectDeviceRuntime()
// (device_factory.h): CUDA (cuda/, the only code that includes CUDA headers)
// when it is compiled in and a device answers, and a host runtime (host/)
// otherwise, which pins nothing and keeps the daemon and its tests working on
// machines without a GPU or driver. One binary serves both.
//
// The host runtime answers every GPU data path with FAILED_PRECONDITION,
// "<operation>: no GPU: <why>" (the reason Describe() gives): a rank that
// hands the daemon device memory on such a machine is misconfigured.
//
// Thread-safety: all methods are safe from any thread, and copies may run
// concurrently (they share the runtime's streams). Registering a range and
// unregistering it are the caller's pairing: a range is registered once and
// unregistered once, with no copies into it in flight.
#ifndef CKPT_GPU_DEVICE_RUNTIME_H_
#define CKPT_GPU_DEVICE_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/ipc_mapping.h"

namespace ckpt::gpu {

// What a rank sends the daemon so that it can reach one device pointer.
// CUDA IPC exports whole allocations, and a tensor usually lives inside a
// larger one (the caching allocator's blocks), hence the offset.
struct IpcExport {
  std::string handle;   // the cudaIpcMemHandle_t bytes, of the allocation base
  uint64_t offset = 0;  // of the pointer from its allocation base
  uint64_t allocation_bytes = 0;
  int device = -1;  // the exporter's device ordinal
};

// An event another process can wait for: cudaIpcEventHandle_t bytes.
struct IpcEvent {
  std::string handle;
  int device = -1;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // "cuda" or "host".
  virtual std::string Name() const = 0;
  // True when at least one GPU can be used; the host runtime says false.
  virtual bool HasDevice() const = 0;
  virtual int DeviceCount() const = 0;
  // One line for logs and status pages, e.g.
  // "CUDA 13.0 (driver 13.0), 1 device: NVIDIA H100 80GB HBM3" or
  // "no GPU: cudaGetDeviceCount: CUDA driver version is insufficient ...".
  virtual std::string Describe() const = 0;

  // Page-locks [ptr, ptr + bytes) for every device (CUDA: cudaHostRegister
  // with cudaHostRegisterPortable); the host runtime does nothing. Both
  // reject a null ptr or zero bytes (INVALID_ARGUMENT). CUDA errors:
  // ALREADY_EXISTS if part of the range is registered, RESOURCE_EXHAUSTED if
  // the memory cannot be locked, others as reported by the runtime.
  virtual absl::Status RegisterHostMemory(void* ptr, size_t bytes) = 0;
  // Undoes RegisterHostMemory; ptr is the start of a registered range.
  // Both reject a null ptr; CUDA: NOT_FOUND if ptr is not registered.
  virtual absl::Status UnregisterHostMemory(void* ptr) = 0;

  // Client side: the IPC handle of the allocation that holds device_ptr
  // (cudaMalloc'd memory; anywhere inside it). INVALID_ARGUMENT for a null
  // or non-device pointer; memory that CUDA cannot export (e.g. from
  // cudaMallocAsync pools) fails as the runtime reports.
  virtual absl::StatusOr<IpcExport> ExportIpcHandle(const void* device_ptr) = 0;

  // Daemon side: maps an allocation exported by another process on device
  // (peer access enabled lazily). allocation_bytes is the exporter's
  // allocation size; a mapping smaller than that is FAILED_PRECONDITION (the
  // handle is not what the rank said). CUDA refuses handles exported by the
  // same process. Open each handle once per process: see IpcMappingCache.
  virtual absl::StatusOr<std::unique_ptr<IpcMapping>> OpenIpcHandle(const std::string& handle,
                                                                    int device,
                                                                    uint64_t allocation_bytes) = 0;

  // Client side, save ordering: records an interprocess event on `stream`
  // (a cudaStream_t; nullptr is the legacy default stream) of the current
  // device, so the daemon's copies can wait for the work queued before it.
  // One event per device is reused: a later record only makes a waiter wait
  // for more, never for less.
  virtual absl::StatusOr<IpcEvent> RecordIpcEvent(void* stream) = 0;
  // Client side, push path: waits for the work queued on `stream`.
  virtual absl::Status SynchronizeStream(void* stream) = 0;
  // Daemon side: waits until an event recorded by RecordIpcEvent in another
  // process has completed. INVALID_ARGUMENT for a malformed handle or device.
  virtual absl::Status WaitIpcEvent(const std::string& handle, int device) = 0;

  // The save path's pull: copies bytes from device memory src to host
  // memory dst (pinned pool memory, already registered), chunk_bytes at a
  // time, spread over the runtime's own non-blocking streams for src's
  // device. on_chunk(offset, length) runs on the calling thread, in order of
  // offset, as soon as each chunk has landed, while later chunks are still
  // copying, so the caller can queue it for writing. Returns when every
  // chunk has landed, or at the first error, after waiting for the copies
  // already issued (dst is never written after the return); chunks reported
  // before an error stay valid. Zero bytes is a no-op; INVALID_ARGUMENT for
  // null pointers, zero chunk_bytes, or a src that is not device memory.
  virtual absl::Status CopyDeviceToHost(
      const void* src, void* dst, uint64_t bytes, uint64_t chunk_bytes,
      const std::function<void(uint64_t offset, uint64_t length)>& on_chunk) = 0;

  // The load path's delivery: host memory src (pinned pool memory) to
  // device memory dst, chunked and streamed like CopyDeviceToHost. Same
  // argument checks, with dst the device side.
  virtual absl::Status CopyHostToDevice(const void* src, void* dst, uint64_t bytes) = 0;
};

}  // namespace ckpt::gpu

#endif  // CKPT_GPU_DEVICE_RUNTIME_H_
