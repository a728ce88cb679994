#include "daemon/coordinator/manifest_io.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/lib/crc32c.h"

namespace ckpt::coordinator {

std::string EncodeManifest(const v1::CheckpointManifest& manifest) {
  std::string out;
  manifest.SerializeToString(&out);
  const uint32_t crc = Crc32c(out.data(), out.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  return out;
}

absl::StatusOr<v1::CheckpointManifest> DecodeManifest(absl::string_view bytes,
                                                      absl::string_view source) {
  if (bytes.size() < 4) {
    return absl::DataLossError(absl::StrCat(source, ": manifest is truncated (", bytes.size(),
                                            " bytes)"));
  }
  const absl::string_view payload = bytes.substr(0, bytes.size() - 4);
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) {
    stored |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[payload.size() + i])) << (8 * i);
  }
  const uint32_t actual = Crc32c(payload.data(), payload.size());
  if (stored != actual) {
    return absl::DataLossError(absl::StrFormat(
        "%s: manifest checksum mismatch (stored %08x, computed %08x)", source, stored, actual));
  }
  v1::CheckpointManifest manifest;
  if (!manifest.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(absl::StrCat(source, ": manifest does not parse"));
  }
  return manifest;
}

}  // namespace ckpt::coordinator
