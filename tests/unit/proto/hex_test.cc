// DecodeHex: exactly the bytes spelled, and nothing for text that is not hex.
#include "proto/lib/hex.h"

#include <string>

#include "tests/catch.h"

namespace ckpt {
namespace {

TEST_CASE("DecodeHex reads both cases and every byte value", "[hex]") {
  CHECK(DecodeHex("") == std::string());
  CHECK(DecodeHex("00ff7Fa0") == std::string("\x00\xff\x7f\xa0", 4));
  std::string all, hex;
  for (int b = 0; b < 256; ++b) {
    all.push_back(static_cast<char>(b));
    hex += "0123456789abcdef"[b >> 4];
    hex += "0123456789ABCDEF"[b & 15];
  }
  CHECK(DecodeHex(hex) == all);
}

TEST_CASE("DecodeHex refuses odd lengths and non-digits", "[hex]") {
  CHECK_FALSE(DecodeHex("abc").has_value());
  CHECK_FALSE(DecodeHex("0g").has_value());
  CHECK_FALSE(DecodeHex("0 ").has_value());
  CHECK_FALSE(DecodeHex("zz").has_value());
}

}  // namespace
}  // namespace ckpt
