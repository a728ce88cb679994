// Open IPC mappings of the ranks' allocations, kept across saves.
//
// Opening a handle costs a driver round trip and CUDA refuses to open the
// same handle twice in one process, while a rank exports the same few
// allocations (its caching allocator's blocks) step after step. So the
// daemon opens each (owner, handle) once and keeps it until the owner — a
// rank, named by whatever string the caller uses — detaches or dies
// (ReleaseOwner).
//
// Mappings are shared: ReleaseOwner drops the cache's references, and each
// mapping closes when the last copy holding it lets go, so a copy in flight
// never reads through a closed mapping.
//
// Thread-safety: all methods are safe from any thread. Opens are
// serialized (one per allocation per rank over a job's life; it keeps two
// threads from opening the same handle twice).
#ifndef CKPT_GPU_IPC_MAPPING_CACHE_H_
#define CKPT_GPU_IPC_MAPPING_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gpu/device_runtime.h"
#include "gpu/ipc_mapping.h"

namespace ckpt::gpu {

class IpcMappingCache {
 public:
  // runtime must outlive the cache.
  explicit IpcMappingCache(DeviceRuntime* runtime);
  IpcMappingCache(const IpcMappingCache&) = delete;
  IpcMappingCache& operator=(const IpcMappingCache&) = delete;

  // The owner's mapping of handle, opened on first use with
  // DeviceRuntime::OpenIpcHandle (whose errors it returns, with the owner).
  // A cached handle asked for with another device or size is
  // FAILED_PRECONDITION (the caller's records disagree with what is open).
  absl::StatusOr<std::shared_ptr<IpcMapping>> Get(const std::string& owner,
                                                  const std::string& handle, int device,
                                                  uint64_t allocation_bytes);

  // Forgets every mapping of owner; each closes once no copy holds it.
  // Unknown owners are fine.
  void ReleaseOwner(const std::string& owner);

  // Mappings cached, over all owners.
  size_t size() const;

 private:
  using Mappings = absl::flat_hash_map<std::string, std::shared_ptr<IpcMapping>>;

  DeviceRuntime* const runtime_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Mappings> by_owner_ ABSL_GUARDED_BY(mu_);
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ckpt::gpu

#endif  // CKPT_GPU_IPC_MAPPING_CACHE_H_
