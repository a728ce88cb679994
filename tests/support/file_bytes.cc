#include "tests/support/file_bytes.h"

#include <fcntl.h>
#include <unistd.h>

#include "tests/catch.h"

namespace ckpt::testing {

void FlipByte(const std::string& path, uint64_t offset, uint8_t mask) {
  const int fd = open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  char byte = 0;
  REQUIRE(pread(fd, &byte, 1, static_cast<off_t>(offset)) == 1);
  byte = static_cast<char>(byte ^ mask);
  REQUIRE(pwrite(fd, &byte, 1, static_cast<off_t>(offset)) == 1);
  REQUIRE(fsync(fd) == 0);
  close(fd);
}

}  // namespace ckpt::testing
