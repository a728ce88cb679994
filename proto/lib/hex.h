// Hex text to bytes, strictly: absl's HexStringToBytes returning a string
// accepts anything (and is deprecated from Abseil 2023 on), and the one
// returning a bool is missing from Debian 12's Abseil 2022.
#ifndef CKPT_PROTO_LIB_HEX_H_
#define CKPT_PROTO_LIB_HEX_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ckpt {

// The bytes that `hex` spells (two digits a byte, either case), or nullopt
// when it has an odd length or a character that is no hex digit.
inline std::optional<std::string> DecodeHex(absl::string_view hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string bytes(hex.size() / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int high = digit(hex[2 * i]), low = digit(hex[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes[i] = static_cast<char>(high << 4 | low);
  }
  return bytes;
}

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_HEX_H_
