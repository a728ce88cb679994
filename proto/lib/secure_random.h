// Random bytes for ids and secrets (sessions, loads, peer transfers, OWNER
// temporaries): from getrandom(2), which blocks only before the kernel's
// pool is seeded. Here, at the bottom, so every layer takes the same.
#ifndef CKPT_PROTO_LIB_SECURE_RANDOM_H_
#define CKPT_PROTO_LIB_SECURE_RANDOM_H_

#include <sys/random.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ckpt {

inline void FillRandom(void* p, size_t n) {
  auto* bytes = static_cast<char*>(p);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(bytes + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
}

// `bytes` random bytes as lowercase hex (session ids, load ids, names of
// temporary files): unguessable, so an id seen says nothing of the next.
inline std::string RandomHex(size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string raw(bytes, '\0');
  FillRandom(raw.data(), raw.size());
  std::string hex(2 * bytes, '0');
  for (size_t i = 0; i < bytes; ++i) {
    const auto b = static_cast<uint8_t>(raw[i]);
    hex[2 * i] = kDigits[b >> 4];
    hex[2 * i + 1] = kDigits[b & 15];
  }
  return hex;
}

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_SECURE_RANDOM_H_
