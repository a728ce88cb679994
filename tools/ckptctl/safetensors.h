// The safetensors format (Hugging Face), as ckptctl export writes it:
//   u64 little-endian N, then N bytes of JSON (padded with spaces to a
//   multiple of 8), then the tensors' bytes back to back, row-major, in the
//   order of their data_offsets (relative to the end of the header).
// The JSON maps each name to {"dtype", "shape", "data_offsets": [begin,
// end]} and "__metadata__" to {"format": "pt"}.
#ifndef CKPT_TOOLS_CKPTCTL_SAFETENSORS_H_
#define CKPT_TOOLS_CKPTCTL_SAFETENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/v1/common.pb.h"

namespace ckpt::ctl {

// "F32", "BF16", "BOOL", "F8_E4M3", ...: safetensors' name of a dtype.
absl::StatusOr<std::string> SafetensorsDType(v1::DType dtype);

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // SafetensorsDType
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets
  uint64_t end = 0;
};

// The whole header: the 8-byte length and the padded JSON.
std::string SafetensorsHeader(const std::vector<SafetensorsEntry>& entries);

// A JSON string literal of s (quotes included).
std::string JsonString(const std::string& s);

// One tensor of a parsed safetensors header; offsets are from the file's
// start (header included).
struct SafetensorsTensor {
  std::string name;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Parses and checks the header of a file of `file_size` bytes whose first
// bytes are `head` (at least 8, and the whole header when it fits).
absl::StatusOr<std::vector<SafetensorsTensor>> ParseSafetensorsHeader(const std::string& head,
                                                                      uint64_t file_size,
                                                                      const std::string& path);

// The most header a file may have (the format's own readers cap it at 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

}  // namespace ckpt::ctl

#endif  // CKPT_TOOLS_CKPTCTL_SAFETENSORS_H_
