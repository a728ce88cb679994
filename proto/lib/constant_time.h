// Equality of secrets (bearer tokens, MACs) without revealing where two
// strings first differ: a byte-by-byte compare that stops early tells a
// remote caller, by its timing, how much of a guess was right.
#ifndef CKPT_PROTO_LIB_CONSTANT_TIME_H_
#define CKPT_PROTO_LIB_CONSTANT_TIME_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace ckpt {

// Equal, in time that depends on the sizes only (the length is not secret:
// an attacker knows the usual token and MAC sizes).
inline bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_CONSTANT_TIME_H_
