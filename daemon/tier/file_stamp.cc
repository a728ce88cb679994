#include "daemon/tier/file_stamp.h"

#include <sys/stat.h>

namespace ckpt::tier {
namespace {

int64_t Nanoseconds(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

}  // namespace

std::optional<FileStamp> StampOf(int fd) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return std::nullopt;
  return FileStamp{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                   static_cast<uint64_t>(st.st_size), Nanoseconds(st.st_ctim),
                   Nanoseconds(st.st_mtim)};
}

}  // namespace ckpt::tier
