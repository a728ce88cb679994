#include "tools/bench/disk_baseline.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace ckpt::bench {
namespace {

constexpr uint64_t kBlock = 8 << 20;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<DiskFigures> MeasureDisk(const std::string& dir, uint64_t bytes) {
  DiskFigures figures;
  bytes = (bytes + kBlock - 1) / kBlock * kBlock;
  const std::string path = absl::StrCat(dir, "/ckpt-bench-disk.bin");
  std::unique_ptr<char, decltype(&std::free)> block(
      static_cast<char*>(std::aligned_alloc(4096, kBlock)), &std::free);
  std::memset(block.get(), 0x5a, kBlock);

  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_DIRECT, 0640);
  if (fd < 0 && errno == EINVAL) {
    figures.direct = false;
    fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0640);
  }
  if (fd < 0) return Errno("open " + path);
  auto start = std::chrono::steady_clock::now();
  for (uint64_t done = 0; done < bytes; done += kBlock) {
    if (write(fd, block.get(), kBlock) != static_cast<ssize_t>(kBlock)) {
      close(fd);
      unlink(path.c_str());
      return Errno("write " + path);
    }
  }
  if (fsync(fd) != 0) return Errno("fsync " + path);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(fd);
  figures.write_gbps = bytes / seconds / 1e9;

  fd = open(path.c_str(), O_RDONLY | (figures.direct ? O_DIRECT : 0));
  if (fd < 0) return Errno("open " + path);
  start = std::chrono::steady_clock::now();
  for (uint64_t done = 0; done < bytes; done += kBlock) {
    if (read(fd, block.get(), kBlock) != static_cast<ssize_t>(kBlock)) {
      close(fd);
      unlink(path.c_str());
      return Errno("read " + path);
    }
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(fd);
  unlink(path.c_str());
  figures.read_gbps = bytes / seconds / 1e9;
  return figures;
}

}  // namespace ckpt::bench
