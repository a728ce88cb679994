// What a stored chunk occupies in its file. A chunk stored raw is `length`
// bytes with CRC32C `crc32c`; an encoded one (docs/compression.md) is
// `stored_length` bytes with `stored_crc32c` at the same offset, decoding
// to the raw `length` bytes. Scrubs, copies and replicas deal in the stored
// bytes (no decoding); loads deliver the raw ones.
//
// Thread-safety: pure functions.
#ifndef CKPT_PROTO_LIB_STORED_CHUNK_H_
#define CKPT_PROTO_LIB_STORED_CHUNK_H_

#include <cstdint>

#include "ckpt/v1/manifest.pb.h"

namespace ckpt {

inline bool IsEncoded(const v1::StoredChunk& chunk) {
  return chunk.codec() != v1::CHUNK_CODEC_NONE;
}
inline uint64_t StoredLength(const v1::StoredChunk& chunk) {
  return IsEncoded(chunk) ? chunk.stored_length() : chunk.length();
}
inline uint32_t StoredCrc32c(const v1::StoredChunk& chunk) {
  return IsEncoded(chunk) ? chunk.stored_crc32c() : chunk.crc32c();
}

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_STORED_CHUNK_H_
