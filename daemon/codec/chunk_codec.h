// How a stored chunk's bytes may be encoded (docs/compression.md): raw
// ("none"), one zstd frame ("zstd"), or the chunk's elements split into one
// plane per byte position, then one zstd frame ("grouped-zstd"). Training
// changes a float's low mantissa bytes and rarely its sign and exponent, so
// the high planes are nearly constant and compress well where the whole
// interleaved float does not (ZipNN's observation).
//
// Every chunk decodes alone (a resharding load reads only the chunks it
// needs), into exactly the raw length the manifest records: a stored chunk
// cannot make the decoder write past it, and one that does not fill it, or
// carries bytes after its frame, is DATA_LOSS naming what was wrong.
//
// Thread-safety: the functions are safe from any thread (each uses a
// zstd context of its own thread).
#ifndef CKPT_DAEMON_CODEC_CHUNK_CODEC_H_
#define CKPT_DAEMON_CODEC_CHUNK_CODEC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ckpt::codec {

enum class Codec : uint8_t { kNone = 0, kZstd = 1, kGroupedZstd = 2 };

// "none", "zstd", "grouped-zstd".
absl::string_view CodecName(Codec codec);
// INVALID_ARGUMENT naming the choices for anything else.
absl::StatusOr<Codec> CodecNamed(absl::string_view name);

struct EncodeOptions {
  int level = 1;  // zstd's: fast, since a save must not wait on it
  // A chunk is stored raw unless encoding saves at least this fraction:
  // decoding a barely smaller chunk costs more than reading its bytes.
  double min_saving = 0.02;
};

// Encodes `raw`, made of elements of `element_bytes` (1 to 16; the planes
// of grouped-zstd; a tail shorter than an element stays in its own plane)
// with `wanted`, into `stored`. Returns the codec the chunk is stored
// with: `wanted`, or kNone when encoding did not save options.min_saving
// (then `stored` is left empty: the raw bytes are stored as they are).
absl::StatusOr<Codec> EncodeChunk(Codec wanted, int element_bytes, absl::Span<const char> raw,
                                  const EncodeOptions& options, std::string* stored);

// Decodes `stored`, encoded by `codec`, into `raw`, which has the raw
// length the manifest records. kNone copies. DATA_LOSS when the bytes are
// no such encoding, decode to another length, or carry trailing bytes;
// INVALID_ARGUMENT for an element size out of range.
absl::Status DecodeChunk(Codec codec, int element_bytes, absl::Span<const char> stored,
                         absl::Span<char> raw);

// The planes of grouped-zstd and back: element i's byte b goes to
// out[b * n + i] for the n whole elements; the tail follows as it is.
// `out` is as long as `in`.
void GroupBytes(int element_bytes, absl::Span<const char> in, absl::Span<char> out);
void UngroupBytes(int element_bytes, absl::Span<const char> in, absl::Span<char> out);

}  // namespace ckpt::codec

#endif  // CKPT_DAEMON_CODEC_CHUNK_CODEC_H_
