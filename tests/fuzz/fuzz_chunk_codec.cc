// Fuzzes the chunk decoders with what a stored chunk may hold, hostile or
// broken: whatever the bytes and the recorded length, DecodeChunk fails
// with DATA_LOSS or fills exactly the chunk (ASan stops any write past it),
// and what decodes encodes and decodes back to itself. The payload is also
// taken as raw bytes: every codec's round trip must be bit-exact.
//
// Input: byte 0 the codec (mod 3), byte 1 the element size (mod 16, + 1),
// bytes 2-5 the recorded raw length (little-endian, mod 1 MiB + 1), then
// the stored bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/codec/chunk_codec.h"

namespace {

using ckpt::codec::Codec;

void RoundTrip(Codec codec, int width, const std::vector<char>& raw) {
  std::string stored;
  absl::StatusOr<Codec> used = ckpt::codec::EncodeChunk(codec, width, raw, {}, &stored);
  if (!used.ok()) std::abort();
  const std::string kept = *used == Codec::kNone ? std::string(raw.begin(), raw.end()) : stored;
  std::vector<char> back(raw.size());
  if (!ckpt::codec::DecodeChunk(*used, width, kept, absl::MakeSpan(back)).ok()) std::abort();
  if (back != raw) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  const Codec codec = static_cast<Codec>(data[0] % 3);
  const int width = data[1] % 16 + 1;
  uint32_t recorded = 0;
  std::memcpy(&recorded, data + 2, 4);
  recorded %= (1u << 20) + 1;
  const char* payload = reinterpret_cast<const char*>(data + 6);
  const size_t payload_size = size - 6;

  std::vector<char> raw(recorded);
  absl::Status decoded = ckpt::codec::DecodeChunk(
      codec, width, absl::MakeConstSpan(payload, payload_size), absl::MakeSpan(raw));
  if (!decoded.ok() && !absl::IsDataLoss(decoded)) std::abort();
  if (decoded.ok()) RoundTrip(codec, width, raw);
  RoundTrip(codec, width, std::vector<char>(payload, payload + payload_size));
  return 0;
}
