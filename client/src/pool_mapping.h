// The client's view of the daemon's pool: the pool's whole address range
// reserved once at attach, with only this job's segments mapped into it
// (the daemon hands them over as file descriptors; see
// proto/lib/segment_handover.h). Leases are offsets into the range; one
// that touches a segment this job does not hold is refused, never touched.
//
// Thread-safety: all methods are safe from any thread. Move-only RAII.
#ifndef CKPT_CLIENT_SRC_POOL_MAPPING_H_
#define CKPT_CLIENT_SRC_POOL_MAPPING_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gpu/device_runtime.h"

namespace ckpt::client {

class PoolMapping {
 public:
  // kReadOnly: a load's view of the daemon's memory tier (its descriptors
  // are read-only).
  enum class Access { kReadWrite, kReadOnly };
  // Reserves `pool_bytes` of address space and maps the segments the
  // daemon's segment socket gives for `request` (a session id, or
  // segments::LoadSpaceRequest for a load's memory space).
  static absl::StatusOr<std::unique_ptr<PoolMapping>> Open(const std::string& segment_socket,
                                                           const std::string& request,
                                                           uint64_t pool_bytes,
                                                           Access access = Access::kReadWrite);
  ~PoolMapping();
  PoolMapping(const PoolMapping&) = delete;
  PoolMapping& operator=(const PoolMapping&) = delete;

  char* base() const { return base_; }
  uint64_t size() const { return size_; }

  // Brings the mapping up to the daemon's segment `epoch` (from a batch):
  // fetches the job's table again when it is newer than the one mapped,
  // maps new and renewed segments and drops those the job no longer holds.
  absl::Status Refresh(uint64_t epoch);

  // The lease [offset, offset + length) as a pointer, or an error when the
  // daemon handed out a range outside the pool or the job's segments.
  absl::StatusOr<char*> Range(uint64_t offset, uint64_t length) const;

  // Pins every mapped segment, and those mapped later, with `gpu` (for DMA
  // from the device); Unpin undoes it. `gpu` must outlive the pinning.
  void Pin(gpu::DeviceRuntime* gpu);
  void Unpin();

 private:
  struct Mapped {
    uint64_t length = 0;
    uint64_t generation = 0;
    bool pinned = false;
  };
  PoolMapping(std::string socket, std::string session, char* base, uint64_t size, Access access)
      : socket_(std::move(socket)),
        session_(std::move(session)),
        base_(base),
        size_(size),
        access_(access) {}
  absl::Status FetchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replaces [offset, offset + length) with inaccessible address space.
  void ReleaseLocked(uint64_t offset, Mapped& mapped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string socket_;
  const std::string session_;
  char* const base_;
  const uint64_t size_;
  const Access access_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Mapped> mapped_ ABSL_GUARDED_BY(mu_);  // by offset
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  gpu::DeviceRuntime* gpu_ ABSL_GUARDED_BY(mu_) = nullptr;  // set while pinned
};

}  // namespace ckpt::client

#endif  // CKPT_CLIENT_SRC_POOL_MAPPING_H_
