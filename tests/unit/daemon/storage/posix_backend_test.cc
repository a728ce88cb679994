// POSIX-only behaviour: bytes really on disk, the O_DIRECT and io_uring paths
// really taken (checked from outside: /proc/self/fdinfo, mincore, a raw
// io_uring probe), fallbacks, and error messages.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "daemon/storage/posix/posix_backend.h"
#include "tests/catch.h"
#include "tests/unit/daemon/storage/test_util.h"

#ifdef CKPT_HAVE_URING
#include <liburing.h>
#endif

namespace ckpt::storage {
namespace {

using testing::AlignedBuffer;
using testing::Pattern;
using testing::TempDir;

// Whether the filesystem under dir accepts O_DIRECT, asked with a raw open.
bool FilesystemTakesODirect(const std::string& dir) {
  const std::string probe = dir + "/odirect-probe";
  const int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_DIRECT, 0600);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

// The open-file flags of every fd of this process that refers to path.
std::vector<long> OpenFlagsOf(const std::string& path) {
  std::vector<long> flags;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (ec || target != path) continue;
    std::ifstream info("/proc/self/fdinfo/" + entry.path().filename().string());
    std::string key;
    while (info >> key) {
      if (key == "flags:") {
        std::string octal;
        info >> octal;
        flags.push_back(std::stol(octal, nullptr, 8));
      }
    }
  }
  return flags;
}

// Pages of path in the page cache, asked with mincore.
size_t ResidentPages(const std::string& path, size_t length) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(map != MAP_FAILED);
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> residency((length + page - 1) / page);
  REQUIRE(::mincore(map, length, residency.data()) == 0);
  ::munmap(map, length);
  size_t resident = 0;
  for (unsigned char r : residency) resident += r & 1;
  return resident;
}

std::string ReadWithIfstream(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

PosixBackendOptions Options(bool uring, bool direct = true, unsigned depth = 32) {
  PosixBackendOptions options;
  options.use_io_uring = uring;
  options.use_o_direct = direct;
  options.queue_depth = depth;
  return options;
}

TEST_CASE("posix: written bytes are really in the file", "[storage][posix]") {
  const bool uring = GENERATE(true, false);
  CAPTURE(uring);
  TempDir dir("/tmp");
  PosixBackend backend(Options(uring));
  const std::string path = dir.path() + "/data.bin";
  const std::string data = Pattern(3 * 4096 + 77, 1);
  AlignedBuffer buffer(data.size());
  std::memcpy(buffer.data(), data.data(), data.size());
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  std::vector<IoOp> ops = {{0, buffer.data(), 3 * 4096}, {3 * 4096, buffer.data() + 3 * 4096, 77}};
  CKPT_REQUIRE_OK((*file)->WriteBatch(ops));
  CKPT_REQUIRE_OK((*file)->Sync());
  CKPT_REQUIRE_OK((*file)->Close());
  REQUIRE(ReadWithIfstream(path) == data);
  REQUIRE((std::filesystem::status(path).permissions() & std::filesystem::perms::others_read) ==
          std::filesystem::perms::none);
}

TEST_CASE("posix: the io_uring engine is used when the kernel allows it", "[storage][posix]") {
  REQUIRE(PosixBackend(Options(false)).engine().Name() == "pread/pwrite");
#ifdef CKPT_HAVE_URING
  io_uring ring;
  const int rc = io_uring_queue_init(4, &ring, 0);
  if (rc == 0) io_uring_queue_exit(&ring);
  CAPTURE(rc);
  REQUIRE(PosixBackend(Options(true)).engine().Name() == (rc == 0 ? "io_uring" : "pread/pwrite"));
#else
  REQUIRE(PosixBackend(Options(true)).engine().Name() == "pread/pwrite");
#endif
}

TEST_CASE("posix: aligned ops use O_DIRECT, the rest the page cache", "[storage][posix]") {
  const bool uring = GENERATE(true, false);
  CAPTURE(uring);
  TempDir dir("/tmp");
  if (!FilesystemTakesODirect(dir.path())) {
    WARN("/tmp refuses O_DIRECT here; nothing to check");
    return;
  }
  PosixBackend backend(Options(uring));
  const std::string path = dir.path() + "/direct.bin";
  constexpr size_t kAligned = 1 << 20;
  AlignedBuffer buffer(kAligned + 4096);
  std::memcpy(buffer.data(), Pattern(kAligned + 4096, 2).data(), kAligned + 4096);
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);

  const std::vector<long> flags = OpenFlagsOf(path);
  REQUIRE(flags.size() == 2);
  REQUIRE(std::count_if(flags.begin(), flags.end(), [](long f) { return f & O_DIRECT; }) == 1);

  CKPT_REQUIRE_OK((*file)->WriteAt(0, buffer.data(), kAligned));
  // Unaligned length after a gap: must go through the page cache.
  CKPT_REQUIRE_OK((*file)->WriteAt(kAligned + 8192, buffer.data() + kAligned, 100));
  CKPT_REQUIRE_OK((*file)->Sync());
  CHECK(ResidentPages(path, kAligned + 8192 + 100) == 1);  // only the unaligned tail's page
  CKPT_REQUIRE_OK((*file)->Close());
  REQUIRE(ReadWithIfstream(path).substr(0, kAligned) == std::string(buffer.data(), kAligned));
}

TEST_CASE("posix: tmpfs works, buffered where it refuses O_DIRECT", "[storage][posix]") {
  const bool uring = GENERATE(true, false);
  CAPTURE(uring);
  TempDir dir("/dev/shm");
  if (FilesystemTakesODirect(dir.path())) {
    WARN("/dev/shm accepts O_DIRECT here; the fallback is not exercised");
  }
  PosixBackend backend(Options(uring));
  const std::string path = dir.path() + "/shm.bin";
  AlignedBuffer buffer(8192);
  std::memcpy(buffer.data(), Pattern(8192, 3).data(), 8192);
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  if (!FilesystemTakesODirect(dir.path())) {
    const std::vector<long> flags = OpenFlagsOf(path);
    REQUIRE(flags.size() == 1);
    REQUIRE((flags[0] & O_DIRECT) == 0);
  }
  CKPT_REQUIRE_OK((*file)->WriteAt(0, buffer.data(), 8192));
  CKPT_REQUIRE_OK((*file)->Sync());
  CKPT_REQUIRE_OK((*file)->Close());
  auto reader = backend.NewReadableFile(path);
  CKPT_REQUIRE_OK(reader);
  AlignedBuffer in(8192);
  auto n = (*reader)->ReadAt(0, in.data(), 8192);
  CKPT_REQUIRE_OK(n);
  REQUIRE(*n == 8192);
  REQUIRE(in.str() == buffer.str());
}

// Kernels since 6.6 let tmpfs take O_DIRECT, so the test above may not reach
// the fallback; character devices still refuse O_DIRECT with EINVAL.
TEST_CASE("posix: files that refuse O_DIRECT are used buffered", "[storage][posix]") {
  const bool uring = GENERATE(true, false);
  CAPTURE(uring);
  REQUIRE(::open("/dev/zero", O_RDONLY | O_DIRECT) == -1);
  REQUIRE(errno == EINVAL);
  PosixBackend backend(Options(uring));

  auto writer = backend.NewWritableFile("/dev/null");
  CKPT_REQUIRE_OK(writer);
  const std::vector<long> flags = OpenFlagsOf("/dev/null");
  REQUIRE_FALSE(flags.empty());
  for (long f : flags) REQUIRE((f & O_DIRECT) == 0);
  AlignedBuffer buffer(8192);
  std::memset(buffer.data(), 7, 8192);
  CKPT_REQUIRE_OK((*writer)->WriteAt(0, buffer.data(), 8192));  // aligned: would go direct
  CKPT_REQUIRE_OK((*writer)->Close());

  auto reader = backend.NewReadableFile("/dev/zero");
  CKPT_REQUIRE_OK(reader);
  auto n = (*reader)->ReadAt(4096, buffer.data(), 8192);
  CKPT_REQUIRE_OK(n);
  REQUIRE(*n == 8192);
  REQUIRE(buffer.str() == std::string(8192, '\0'));
}

TEST_CASE("posix: shallow and deep queues give the same bytes", "[storage][posix]") {
  const unsigned depth = GENERATE(1u, 3u, 64u);
  CAPTURE(depth);
  TempDir dir("/tmp");
  PosixBackend backend(Options(true, true, depth));
  const std::string path = dir.path() + "/q.bin";
  constexpr size_t kOps = 50, kLen = 8192;
  const std::string data = Pattern(kOps * kLen, depth);
  AlignedBuffer buffer(data.size());
  std::memcpy(buffer.data(), data.data(), data.size());
  std::vector<IoOp> ops;
  for (size_t i = 0; i < kOps; ++i) {
    const size_t k = (i * 17) % kOps;
    ops.push_back({k * kLen, buffer.data() + k * kLen, kLen});
  }
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteBatch(ops));
  CKPT_REQUIRE_OK((*file)->Close());
  REQUIRE(ReadWithIfstream(path) == data);

  AlignedBuffer in(data.size());
  std::vector<IoOp> reads;
  for (size_t i = 0; i < kOps; ++i) reads.push_back({i * kLen, in.data() + i * kLen, kLen});
  auto reader = backend.NewReadableFile(path);
  CKPT_REQUIRE_OK(reader);
  CKPT_REQUIRE_OK((*reader)->ReadBatch(reads));
  REQUIRE(in.str() == data);
}

TEST_CASE("posix: errors name the operation, path and offset", "[storage][posix]") {
  const bool uring = GENERATE(true, false);
  CAPTURE(uring);
  PosixBackend backend(Options(uring));

  // /dev/full answers every write with ENOSPC: a real error from the kernel.
  auto full = backend.NewWritableFile("/dev/full");
  CKPT_REQUIRE_OK(full);
  AlignedBuffer buffer(4096);
  std::memset(buffer.data(), 1, 4096);
  const absl::Status s = (*full)->WriteAt(4096, buffer.data(), 4096);
  INFO(s.ToString());
  REQUIRE(s.code() == absl::StatusCode::kResourceExhausted);
  REQUIRE_THAT(std::string(s.message()), Catch::Contains("/dev/full at offset 4096") &&
                                             Catch::Contains("No space left on device") &&
                                             Catch::Contains("write"));
  std::vector<IoOp> ops = {{0, buffer.data(), 4096}, {8192, buffer.data(), 4096}};
  REQUIRE((*full)->WriteBatch(ops).code() == absl::StatusCode::kResourceExhausted);

  TempDir dir("/tmp");
  const std::string missing = dir.path() + "/nope/x.bin";
  const absl::Status open = backend.NewWritableFile(missing).status();
  REQUIRE(open.code() == absl::StatusCode::kNotFound);
  REQUIRE(std::string(open.message()) ==
          "open " + missing + " for writing: No such file or directory");
  const absl::Status mkdir = backend.CreateDirs("/proc/self/ckpt-cannot/x");
  REQUIRE_FALSE(mkdir.ok());
  REQUIRE_THAT(std::string(mkdir.message()), Catch::Contains("mkdir /proc/self/ckpt-cannot"));
}

}  // namespace
}  // namespace ckpt::storage

namespace ckpt::storage {
namespace {

TEST_CASE("posix backend writes and reads registered memory with fixed buffers", "[posix][fixed]") {
  char pattern[] = "/tmp/ckpt-fixed-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  auto backend = NewPosixBackend();
  constexpr size_t kBytes = 1 << 20;
  char* registered = static_cast<char*>(std::aligned_alloc(4096, 2 * kBytes));
  char* plain = static_cast<char*>(std::aligned_alloc(4096, kBytes));
  for (size_t i = 0; i < kBytes; ++i) registered[i] = static_cast<char>(i * 7 + 3);
  REQUIRE(backend->RegisterMemory(registered, 2 * kBytes, size_t{1} << 30).ok());
  backend->PrepareThread();  // this thread moves pool data, as a writer does

  const uint64_t before = FixedBufferTransfers();
  {
    auto file = backend->NewWritableFile(dir + "/f.bin");
    REQUIRE(file.ok());
    std::vector<IoOp> ops = {{0, registered, kBytes / 2},
                             {kBytes / 2, registered + kBytes / 2, kBytes / 2}};
    REQUIRE((*file)->WriteBatch(ops).ok());
    REQUIRE((*file)->Sync().ok());
    REQUIRE((*file)->Close().ok());
  }
  auto file = backend->NewReadableFile(dir + "/f.bin");
  REQUIRE(file.ok());
  std::vector<IoOp> reads = {{0, registered + kBytes, kBytes}};
  REQUIRE((*file)->ReadBatch(reads).ok());
  CHECK(std::memcmp(registered, registered + kBytes, kBytes) == 0);
  // Memory outside the registration still works, without fixed buffers.
  const uint64_t fixed = FixedBufferTransfers();
  REQUIRE((*file)->ReadBatch(std::vector<IoOp>{{0, plain, kBytes}}).ok());
  CHECK(std::memcmp(registered, plain, kBytes) == 0);
  // A thread that was not prepared (a request handler) never registers the
  // memory, even to read into it.
  std::thread handler([&] {
    std::memset(registered + kBytes, 0, kBytes);
    REQUIRE((*file)->ReadBatch(std::vector<IoOp>{{0, registered + kBytes, kBytes}}).ok());
  });
  handler.join();
  CHECK(std::memcmp(registered, registered + kBytes, kBytes) == 0);
  if (std::string(static_cast<PosixBackend&>(*backend).engine().Name()) == "io_uring") {
    CHECK(fixed - before >= 3);              // two writes and a read went fixed
    CHECK(FixedBufferTransfers() == fixed);  // the plain and the handler's reads did not
  } else {
    WARN("io_uring unavailable: fixed buffers not exercised");
  }
  std::free(registered);
  std::free(plain);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a renewed piece of registered memory is written from its new pages, still fixed",
          "[posix][fixed]") {
  char pattern[] = "/tmp/ckpt-renew-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  auto backend = NewPosixBackend();
  constexpr size_t kPiece = 1 << 20;
  // Two pieces, each its own memfd, as the pool's segments are.
  char* base = static_cast<char*>(
      mmap(nullptr, 2 * kPiece, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  REQUIRE(base != MAP_FAILED);
  auto back_with_memfd = [&](size_t piece, char fill) {
    const int fd = memfd_create("renew-test", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, kPiece) == 0);
    REQUIRE(mmap(base + piece * kPiece, kPiece, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                 0) != MAP_FAILED);
    close(fd);
    std::memset(base + piece * kPiece, fill, kPiece);
  };
  back_with_memfd(0, 'a');
  back_with_memfd(1, 'b');
  REQUIRE(backend->RegisterMemory(base, 2 * kPiece, kPiece).ok());
  backend->PrepareThread();
  auto write_piece = [&](size_t piece, const std::string& name) {
    auto file = backend->NewWritableFile(dir + "/" + name);
    REQUIRE(file.ok());
    REQUIRE((*file)->WriteBatch(std::vector<IoOp>{{0, base + piece * kPiece, kPiece}}).ok());
    REQUIRE((*file)->Sync().ok());
    REQUIRE((*file)->Close().ok());
    std::ifstream in(dir + "/" + name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const uint64_t before = FixedBufferTransfers();
  CHECK(write_piece(1, "old.bin") == std::string(kPiece, 'b'));
  // Piece 1 gets new pages at the same addresses.
  back_with_memfd(1, 'c');
  backend->RenewMemory(base + kPiece, kPiece);
  CHECK(write_piece(1, "new.bin") == std::string(kPiece, 'c'));
  CHECK(write_piece(0, "same.bin") == std::string(kPiece, 'a'));
  if (std::string(static_cast<PosixBackend&>(*backend).engine().Name()) == "io_uring") {
    CHECK(FixedBufferTransfers() - before >= 3);  // all three went fixed
  }
  munmap(base, 2 * kPiece);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ckpt::storage
