// The storage device's own limit, measured in the bench directory the ways a
// writer can drive it, so that ckpt's figures are compared with the best of
// them and not with a weak stand-in:
//  - single: one thread, one O_DIRECT sequential write() after another (8 MiB),
//    fsync at the end; then read() back the same way;
//  - uring: one file, io_uring, O_DIRECT, 4 MiB blocks, queue depth 16, fsync
//    at the end (what `fio --ioengine=io_uring --direct=1 --bs=4m
//    --iodepth=16 --end_fsync=1` does);
//  - parallel: the parallelism ckpt itself uses, `streams` threads each with
//    its own file and ring at queue depth 16.
// The device's figure is the best of the three, measured in the same run
// (these machines are shared and noisy).
#ifndef CKPT_TOOLS_BENCH_DISK_BASELINE_H_
#define CKPT_TOOLS_BENCH_DISK_BASELINE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt::bench {

struct DiskFigures {
  double write_gbps = 0;  // GB/s = 1e9 bytes per second; the best way
  double read_gbps = 0;
  // Every way's figure, e.g. "disk_write_uring_gbps".
  std::map<std::string, double> ways;
  bool direct = true;  // false when the filesystem refused O_DIRECT
};

struct DiskOptions {
  int streams = 4;  // threads (files) of the parallel way
  unsigned queue_depth = 16;
};

absl::StatusOr<DiskFigures> MeasureDisk(const std::string& dir, uint64_t bytes,
                                        const DiskOptions& options = {});

// Reads existing files the same ways (those with files), e.g. checkpoints' own data
// files: bytes written as long ago as the ones a load reads, which this disk
// serves more slowly than bytes just written. Each way reads its own set
// (whole 8 MiB blocks of each file), since data read once comes back faster
// the second time. Keys are "disk_read_<label><way>_gbps".
struct ReadSets {  // an empty set skips its way
  std::vector<std::string> single, uring, parallel;
};
absl::StatusOr<DiskFigures> MeasureReads(const ReadSets& sets, const std::string& label,
                                         const DiskOptions& options = {});

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_DISK_BASELINE_H_
