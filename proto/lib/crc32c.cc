#include "proto/lib/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace ckpt {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t length) {
  // ISA-L's crc32_iscsi neither pre- nor post-inverts, and takes an int
  // length: invert around it and feed it pieces below 2 GiB.
  uint32_t state = ~crc;
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (length > 0) {
    const size_t piece = std::min<size_t>(length, size_t{1} << 30);
    state = crc32_iscsi(const_cast<unsigned char*>(bytes), static_cast<int>(piece), state);
    bytes += piece;
    length -= piece;
  }
  return ~state;
}

uint32_t Crc32c(const void* data, size_t length) { return Crc32cExtend(0, data, length); }

}  // namespace ckpt
