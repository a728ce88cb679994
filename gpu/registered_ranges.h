// The host ranges this process has page-locked with cudaHostRegister, so
// that a copy can be split where one registration ends.
//
// CUDA treats each registration as its own allocation: one cudaMemcpyAsync
// whose host side runs from one registered range into the next fails with
// cudaErrorInvalidValue, even when the two are adjacent. The daemon's pool
// is registered segment by segment (a segment renewed for another job is
// re-registered alone) and a rank registers each pool segment it maps, so
// a 4 MiB chunk that straddles two segments is an ordinary event; seen on
// an H200 as a pull of a 256 MiB slice failing at its 17th chunk.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_GPU_REGISTERED_RANGES_H_
#define CKPT_GPU_REGISTERED_RANGES_H_

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::gpu {

class RegisteredRanges {
 public:
  // [begin, begin + bytes) was registered; bytes > 0, and it overlaps no
  // range added before (CUDA refuses that first).
  void Add(uintptr_t begin, uint64_t bytes);
  // The range that starts at begin was unregistered; no-op for an unknown one.
  void Remove(uintptr_t begin);

  // The length of the first piece of [at, at + bytes) that lies wholly in
  // one registration or wholly outside all of them: bytes when nothing ends
  // or begins inside the span.
  uint64_t PieceAt(uintptr_t at, uint64_t bytes) const;

 private:
  mutable absl::Mutex mu_;
  std::map<uintptr_t, uintptr_t> ranges_ ABSL_GUARDED_BY(mu_);  // begin -> end
};

// The process's registrations (CUDA's are per process, whichever runtime
// object made them).
RegisteredRanges& ProcessRegistrations();

}  // namespace ckpt::gpu

#endif  // CKPT_GPU_REGISTERED_RANGES_H_
