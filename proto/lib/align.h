// Rounding sizes and offsets to an alignment: items in data files and
// slices in pool rooms start on 4 KiB blocks so that writes and reads can
// use O_DIRECT. One definition for the coordinator, the daemon and tests.
//
// Thread-safety: pure functions.
#ifndef CKPT_PROTO_LIB_ALIGN_H_
#define CKPT_PROTO_LIB_ALIGN_H_

#include <cstdint>

namespace ckpt {

// `value` rounded up to a multiple of `alignment` (> 0; any value, not only
// powers of two). value + alignment must not pass 2^64, which RequestLimits
// guarantees for every size a request can carry.
constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_ALIGN_H_
