// Byte counts for people, in messages of the pool: "1.5 GiB", "12 B".
#ifndef CKPT_DAEMON_POOL_HUMAN_BYTES_H_
#define CKPT_DAEMON_POOL_HUMAN_BYTES_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckpt::pool {

inline std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace ckpt::pool

#endif  // CKPT_DAEMON_POOL_HUMAN_BYTES_H_
