// CRC32C (Castagnoli), the checksum of every stored chunk and of the
// manifest. Standard values: Crc32c("123456789") == 0xE3069283.
#ifndef CKPT_PROTO_LIB_CRC32C_H_
#define CKPT_PROTO_LIB_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace ckpt {

// CRC32C of data[0, length).
uint32_t Crc32c(const void* data, size_t length);
// The CRC32C of (bytes that gave `crc`) followed by data[0, length).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t length);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_CRC32C_H_
