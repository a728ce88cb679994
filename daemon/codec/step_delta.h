// A step stored as a delta against a base step of the same layout: the XOR
// of their bytes, chunk by chunk. Training moves a float's low mantissa
// bits and rarely the rest, so the XOR is mostly zero bytes in its high
// planes and compresses far better than the step itself (ExCP, LowDiff,
// Check-N-Run). XOR is its own inverse: the same call rebuilds the step
// from the base and the delta.
#ifndef CKPT_DAEMON_CODEC_STEP_DELTA_H_
#define CKPT_DAEMON_CODEC_STEP_DELTA_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"

namespace ckpt::codec {

// bytes[i] ^= base[i] for every i; the spans are equally long.
inline void XorInto(absl::Span<const char> base, absl::Span<char> bytes) {
  size_t i = 0;
  // Eight bytes at a time (the compiler widens it further).
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t a, b;
    std::memcpy(&a, bytes.data() + i, 8);
    std::memcpy(&b, base.data() + i, 8);
    a ^= b;
    std::memcpy(bytes.data() + i, &a, 8);
  }
  for (; i < bytes.size(); ++i) bytes[i] ^= base[i];
}

}  // namespace ckpt::codec

#endif  // CKPT_DAEMON_CODEC_STEP_DELTA_H_
