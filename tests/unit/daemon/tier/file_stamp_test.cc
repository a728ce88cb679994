// A memory-tier file's stamp (daemon/tier/file_stamp.h) moves with a
// write to its bytes through a descriptor or a new mapping, and stays put
// while they are only read: what lets a load skip bytes verified before
// it. (On kernels before 6.13 a write in the same clock tick as the
// file's creation could leave it: these cases write right after.)
#include "daemon/tier/file_stamp.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "tests/catch.h"

namespace ckpt::tier {
namespace {

// A memfd holding `bytes`, as the memory tier keeps a file.
int FileOf(const std::string& bytes) {
  const int fd = memfd_create("file-stamp-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  return fd;
}

TEST_CASE("a file's stamp stays while it is read and moves with any write", "[server][stamp]") {
  const std::string bytes(1 << 20, 'x');
  const int fd = FileOf(bytes);
  const std::optional<FileStamp> before = StampOf(fd);
  REQUIRE(before.has_value());
  CHECK(before->size == bytes.size());

  SECTION("read through the descriptor and a mapping: unchanged") {
    std::string back(bytes.size(), '\0');
    REQUIRE(pread(fd, back.data(), back.size(), 0) == static_cast<ssize_t>(back.size()));
    void* map = mmap(nullptr, bytes.size(), PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED);
    CHECK(std::memcmp(map, bytes.data(), bytes.size()) == 0);
    munmap(map, bytes.size());
    CHECK(StampOf(fd) == before);
  }
  SECTION("one byte written through another descriptor, even with the same value") {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    const int writer = open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(writer >= 0);
    REQUIRE(pwrite(writer, "x", 1, 4096) == 1);
    close(writer);
    CHECK(StampOf(fd) != before);
  }
  SECTION("one byte written through a new writable mapping, its page's first touch") {
    void* map = mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED);
    static_cast<char*>(map)[bytes.size() / 2] ^= 1;
    munmap(map, bytes.size());
    CHECK(StampOf(fd) != before);
  }
  SECTION("another file with the same bytes") {
    const int other = FileOf(bytes);
    CHECK(StampOf(other) != before);
    close(other);
  }
  close(fd);
}

TEST_CASE("no stamp without an open file", "[server][stamp]") {
  CHECK_FALSE(StampOf(-1).has_value());
  const int fd = FileOf("gone");
  close(fd);
  CHECK_FALSE(StampOf(fd).has_value());
}

}  // namespace
}  // namespace ckpt::tier
