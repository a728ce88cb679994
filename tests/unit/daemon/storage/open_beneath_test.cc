// Opening files named by untrusted input (a manifest): the name stays inside
// its directory, links out are refused, a FIFO is refused without blocking,
// and whole-file reads are bounded before they allocate. Real POSIX files in
// a temporary directory; the name rules also against the memory backend.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include "daemon/storage/backend.h"
#include "daemon/storage/backend_factory.h"
#include "tests/catch.h"
#include "tests/unit/daemon/storage/test_util.h"

namespace ckpt::storage {
namespace {

using testing::TempDir;

void Write(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

std::string ReadAllOf(ReadableFile& file) {
  absl::StatusOr<uint64_t> size = file.Size();
  REQUIRE(size.ok());
  std::string out(*size, '\0');
  absl::StatusOr<size_t> got = file.ReadAt(0, out.data(), out.size());
  REQUIRE(got.ok());
  out.resize(*got);
  return out;
}

TEST_CASE("ValidateConfinedName accepts writer file names only", "[storage][confined]") {
  for (const char* good : {"data/host-0.bin", "MANIFEST", "data/a.b_c-9.bin", "a/b/c/d/e/f/g/h"}) {
    INFO(good);
    CHECK(ValidateConfinedName(good).ok());
  }
  for (const char* bad :
       {"", "/etc/passwd", "../x", "data/../../x", "data/..", "./data/x", "data//x", "data/x/",
        "data/\\x", "data/x y", "data/\n", "a/b/c/d/e/f/g/h/i"}) {
    INFO(bad);
    const absl::Status s = ValidateConfinedName(bad);
    CHECK(absl::IsInvalidArgument(s));
  }
  CHECK(absl::IsInvalidArgument(ValidateConfinedName(std::string(2000, 'a'))));
  CHECK(absl::IsInvalidArgument(ValidateConfinedName(std::string("da\0ta", 5))));
}

TEST_CASE("OpenReadOnlyBeneath reads regular files inside the directory", "[storage][confined]") {
  TempDir tmp("/tmp");
  const std::string step = tmp.path() + "/step-1";
  REQUIRE(::mkdir(step.c_str(), 0750) == 0);
  REQUIRE(::mkdir((step + "/data").c_str(), 0750) == 0);
  Write(step + "/data/h-0.bin", "payload");
  for (bool direct : {false, true}) {
    PosixBackendOptions options;
    options.use_o_direct = direct;
    std::unique_ptr<Backend> backend = NewPosixBackend(options);
    absl::StatusOr<std::unique_ptr<ReadableFile>> file =
        backend->OpenReadOnlyBeneath(step, "data/h-0.bin");
    INFO(file.status().ToString());
    REQUIRE(file.ok());
    CHECK(ReadAllOf(**file) == "payload");
  }
}

TEST_CASE("OpenReadOnlyBeneath refuses links out, traversal and special files",
          "[storage][confined]") {
  TempDir tmp("/tmp");
  const std::string step = tmp.path() + "/step-1";
  const std::string outside = tmp.path() + "/secret";
  REQUIRE(::mkdir(step.c_str(), 0750) == 0);
  REQUIRE(::mkdir(outside.c_str(), 0750) == 0);
  Write(outside + "/key", "secret bytes");
  std::unique_ptr<Backend> backend = NewPosixBackend();

  SECTION("a symlinked file") {
    REQUIRE(::mkdir((step + "/data").c_str(), 0750) == 0);
    REQUIRE(::symlink((outside + "/key").c_str(), (step + "/data/h-0.bin").c_str()) == 0);
    const auto file = backend->OpenReadOnlyBeneath(step, "data/h-0.bin");
    INFO(file.status().ToString());
    CHECK(absl::IsFailedPrecondition(file.status()));
    CHECK(file.status().message().find("symbolic link") != absl::string_view::npos);
    CHECK(file.status().message().find(step + "/data/h-0.bin") != absl::string_view::npos);
  }
  SECTION("a symlinked directory on the way") {
    REQUIRE(::symlink(outside.c_str(), (step + "/data").c_str()) == 0);
    const auto file = backend->OpenReadOnlyBeneath(step, "data/key");
    INFO(file.status().ToString());
    CHECK(absl::IsFailedPrecondition(file.status()));
    CHECK(file.status().message().find(step + "/data") != absl::string_view::npos);
  }
  SECTION("a symlinked step directory") {
    const std::string link = tmp.path() + "/step-2";
    REQUIRE(::symlink(outside.c_str(), link.c_str()) == 0);
    const auto file = backend->OpenReadOnlyBeneath(link, "key");
    INFO(file.status().ToString());
    CHECK(absl::IsFailedPrecondition(file.status()));
  }
  SECTION("traversal and absolute names never reach the file system") {
    for (const char* name : {"../secret/key", "/etc/passwd", "data/../../secret/key"}) {
      const auto file = backend->OpenReadOnlyBeneath(step, name);
      INFO(name << ": " << file.status().ToString());
      CHECK(absl::IsInvalidArgument(file.status()));
    }
  }
  SECTION("a FIFO is refused at once") {
    // Opening a FIFO for reading blocks until a writer comes, unless
    // O_NONBLOCK: with a regression this test hangs rather than fails.
    REQUIRE(::mkfifo((step + "/fifo").c_str(), 0600) == 0);
    const auto file = backend->OpenReadOnlyBeneath(step, "fifo");
    INFO(file.status().ToString());
    CHECK(absl::IsFailedPrecondition(file.status()));
    CHECK(file.status().message().find("FIFO") != absl::string_view::npos);
    const auto plain = backend->NewReadableFile(step + "/fifo");
    INFO(plain.status().ToString());
    CHECK(absl::IsFailedPrecondition(plain.status()));
  }
  SECTION("a directory") {
    REQUIRE(::mkdir((step + "/dir").c_str(), 0750) == 0);
    CHECK_FALSE(backend->OpenReadOnlyBeneath(step, "dir").ok());
  }
  SECTION("a missing file is NOT_FOUND") {
    CHECK(absl::IsNotFound(backend->OpenReadOnlyBeneath(step, "data/none.bin").status()));
  }
}

TEST_CASE("whole-file reads are bounded before they allocate", "[storage][confined]") {
  TempDir tmp("/tmp");
  Write(tmp.path() + "/MANIFEST", std::string(100, 'm'));
  std::unique_ptr<Backend> backend = NewPosixBackend();
  absl::StatusOr<std::string> ok = ReadWholeFileBeneath(*backend, tmp.path(), "MANIFEST", 100);
  REQUIRE(ok.ok());
  CHECK(ok->size() == 100);
  absl::StatusOr<std::string> big = ReadWholeFileBeneath(*backend, tmp.path(), "MANIFEST", 99);
  INFO(big.status().ToString());
  CHECK(absl::IsFailedPrecondition(big.status()));
  CHECK(big.status().message().find("100 bytes") != absl::string_view::npos);
  CHECK(big.status().message().find("limit of 99") != absl::string_view::npos);
  CHECK(absl::IsFailedPrecondition(ReadWholeFile(*backend, tmp.path() + "/MANIFEST", 10).status()));
}

TEST_CASE("the memory backend applies the same name rules", "[storage][confined]") {
  std::unique_ptr<Backend> backend = NewMemoryBackend();
  REQUIRE(backend->CreateDirs("/r/step-1/data").ok());
  {
    auto file = backend->NewWritableFile("/r/step-1/data/h-0.bin");
    REQUIRE(file.ok());
    REQUIRE((*file)->WriteAt(0, "xy", 2).ok());
    REQUIRE((*file)->Close().ok());
  }
  REQUIRE(backend->CreateDirs("/r/secret").ok());
  REQUIRE(backend->NewWritableFile("/r/secret/key").ok());
  CHECK(backend->OpenReadOnlyBeneath("/r/step-1", "data/h-0.bin").ok());
  CHECK(
      absl::IsInvalidArgument(backend->OpenReadOnlyBeneath("/r/step-1", "../secret/key").status()));
}

}  // namespace
}  // namespace ckpt::storage
