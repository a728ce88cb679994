// The storage device's own limit, measured the plainest way: one O_DIRECT
// sequential write (then fsync) and read of a file in the bench directory.
#ifndef CKPT_TOOLS_BENCH_DISK_BASELINE_H_
#define CKPT_TOOLS_BENCH_DISK_BASELINE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ckpt::bench {

struct DiskFigures {
  double write_gbps = 0;  // GB/s = 1e9 bytes per second
  double read_gbps = 0;
  bool direct = true;     // false when the filesystem refused O_DIRECT
};

absl::StatusOr<DiskFigures> MeasureDisk(const std::string& dir, uint64_t bytes);

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_DISK_BASELINE_H_
