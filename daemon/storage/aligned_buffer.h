// A buffer for direct I/O: block-aligned (O_DIRECT's 4 KiB, or a larger
// power of two), grown on demand and kept for the next use, so a thread or
// a reader that moves chunks allocates once, not per chunk.
//
// Thread-safety: one user at a time.
#ifndef CKPT_DAEMON_STORAGE_ALIGNED_BUFFER_H_
#define CKPT_DAEMON_STORAGE_ALIGNED_BUFFER_H_

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "proto/lib/align.h"

namespace ckpt::storage {

class AlignedBuffer {
 public:
  // `alignment`: a power of two is used when above 4096; anything else
  // gets 4096.
  explicit AlignedBuffer(uint64_t alignment = 4096)
      : alignment_(alignment > 4096 && (alignment & (alignment - 1)) == 0 ? alignment : 4096) {}

  // At least `bytes`, uninitialised; null when the memory is not there.
  char* Get(uint64_t bytes) {
    if (capacity_ < bytes) {
      data_.reset();
      capacity_ = 0;
      void* p = nullptr;
      if (posix_memalign(&p, alignment_, AlignUp(bytes, alignment_)) != 0) return nullptr;
      data_.reset(static_cast<char*>(p));
      capacity_ = AlignUp(bytes, alignment_);
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  const uint64_t alignment_;
  std::unique_ptr<char, Free> data_;
  uint64_t capacity_ = 0;
};

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_ALIGNED_BUFFER_H_
