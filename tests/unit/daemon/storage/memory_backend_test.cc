// The memory backend as a memory tier: files in blocks (bit-exact across
// block edges, holes read as zeros), and a byte budget counted over every
// block held, open-but-removed files included. Its Backend semantics are
// checked by backend_conformance_test.cc with the other backends.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/memory/memory_backend.h"
#include "tests/catch.h"
#include "tests/unit/daemon/storage/test_util.h"

namespace ckpt::storage {
namespace {

using testing::Pattern;

constexpr uint64_t kBlock = 4096;

std::unique_ptr<WritableFile> Open(Backend& backend, const std::string& path) {
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  return *std::move(file);
}

void WriteFile(Backend& backend, const std::string& path, const std::string& contents) {
  std::unique_ptr<WritableFile> file = Open(backend, path);
  CKPT_REQUIRE_OK(file->WriteAt(0, contents.data(), contents.size()));
  CKPT_REQUIRE_OK(file->Close());
}

std::string ReadFile(Backend& backend, const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(backend, path);
  CKPT_REQUIRE_OK(contents);
  return *contents;
}

std::unique_ptr<ReadableFile> OpenReader(Backend& backend, const std::string& path) {
  auto file = backend.NewReadableFile(path);
  CKPT_REQUIRE_OK(file);
  return *std::move(file);
}

// Writes src into the model the way a file grows: holes read as zeros.
void ApplyToModel(std::string& model, uint64_t offset, const std::string& src) {
  if (model.size() < offset + src.size()) model.resize(offset + src.size(), '\0');
  model.replace(offset, src.size(), src);
}

// Leaves freed blocks full of non-zero bytes for the allocator to hand out
// again, so a block that was not zeroed where it should be shows.
void DirtyTheHeap(MemoryBackend& backend, uint64_t block_bytes) {
  CKPT_REQUIRE_OK(backend.CreateDirs("/dirty"));
  WriteFile(backend, "/dirty/f", std::string(64 * block_bytes, '\xab'));
  CKPT_REQUIRE_OK(backend.RemoveAll("/dirty"));
}

TEST_CASE("memory backend: writes and reads across block edges are bit-exact", "[storage]") {
  // 1 and 7: every write and read crosses many edges; 4099: odd, near a page.
  const uint64_t block_bytes = GENERATE(uint64_t{1}, uint64_t{7}, uint64_t{4099});
  CAPTURE(block_bytes);
  MemoryBackend backend(MemoryBackendOptions{.block_bytes = block_bytes});
  DirtyTheHeap(backend, block_bytes);
  const std::string path = "/f.bin";
  std::string model;
  {
    std::unique_ptr<WritableFile> file = Open(backend, path);
    std::mt19937_64 rng(block_bytes);
    for (int i = 0; i < 60; ++i) {
      // Some overwrite, some extend, some leave a hole behind them.
      const uint64_t offset = rng() % (model.size() + 3 * block_bytes + 5000);
      const size_t length = 1 + rng() % (2 * block_bytes + 3000);
      CAPTURE(i, offset, length);
      const std::string data = Pattern(length, 100 + i);
      CKPT_REQUIRE_OK(file->WriteAt(offset, data.data(), length));
      ApplyToModel(model, offset, data);
    }
    CKPT_REQUIRE_OK(file->Close());
  }
  REQUIRE(ReadFile(backend, path) == model);

  std::unique_ptr<ReadableFile> reader = OpenReader(backend, path);
  auto size = reader->Size();
  CKPT_REQUIRE_OK(size);
  REQUIRE(*size == model.size());
  std::mt19937_64 rng(block_bytes + 1);
  for (int i = 0; i < 200; ++i) {
    const uint64_t offset = rng() % (model.size() + 100);
    const size_t length = rng() % (3 * block_bytes + 5000);
    CAPTURE(i, offset, length);
    std::string buffer(length, '\xee');
    auto n = reader->ReadAt(offset, buffer.data(), length);
    CKPT_REQUIRE_OK(n);
    const std::string expected = offset < model.size() ? model.substr(offset, length) : "";
    REQUIRE(*n == expected.size());
    REQUIRE(buffer.substr(0, *n) == expected);
  }
}

TEST_CASE("memory backend: holes read as zeros and hold no blocks", "[storage]") {
  MemoryBackend backend(MemoryBackendOptions{.block_bytes = kBlock});
  DirtyTheHeap(backend, kBlock);
  REQUIRE(backend.bytes_held() == 0);
  const std::string path = "/sparse.bin";
  std::string model;
  std::unique_ptr<WritableFile> file = Open(backend, path);
  // The middle of block 0, then a few bytes of block 5, then block 7: the
  // rest of blocks 0 and 5 were never written, blocks 1-4 and 6 never exist.
  const std::vector<std::pair<uint64_t, std::string>> writes = {
      {10, Pattern(3, 1)}, {5 * kBlock + 100, Pattern(10, 2)}, {7 * kBlock + 1, Pattern(50, 3)}};
  for (const auto& [offset, data] : writes) {
    CKPT_REQUIRE_OK(file->WriteAt(offset, data.data(), data.size()));
    ApplyToModel(model, offset, data);
  }
  CKPT_REQUIRE_OK(file->Close());
  REQUIRE(backend.bytes_held() == 3 * kBlock);
  REQUIRE(model.size() == 7 * kBlock + 51);
  REQUIRE(ReadFile(backend, path) == model);

  // Within one hole, and from a hole into data.
  std::unique_ptr<ReadableFile> reader = OpenReader(backend, path);
  std::string buffer(kBlock, '\xee');
  auto n = reader->ReadAt(2 * kBlock + 5, buffer.data(), kBlock);
  CKPT_REQUIRE_OK(n);
  REQUIRE(*n == kBlock);
  REQUIRE(buffer == std::string(kBlock, '\0'));
  n = reader->ReadAt(5 * kBlock + 90, buffer.data(), 30);
  CKPT_REQUIRE_OK(n);
  REQUIRE(*n == 30);
  REQUIRE(buffer.substr(0, 30) == model.substr(5 * kBlock + 90, 30));
}

TEST_CASE("memory backend: a write past the budget is refused whole", "[storage]") {
  MemoryBackend backend(MemoryBackendOptions{.budget_bytes = 3 * kBlock, .block_bytes = kBlock});
  REQUIRE(backend.budget_bytes() == 3 * kBlock);
  const std::string path = "/tier/a.bin";
  CKPT_REQUIRE_OK(backend.CreateDirs("/tier"));
  const std::string first = Pattern(2 * kBlock, 1);
  std::unique_ptr<WritableFile> file = Open(backend, path);
  CKPT_REQUIRE_OK(file->WriteAt(0, first.data(), first.size()));
  REQUIRE(backend.bytes_held() == 2 * kBlock);

  // Overlaps block 1, which exists, and needs blocks 2-4: three, one fits.
  const std::string big = Pattern(3 * kBlock, 2);
  const absl::Status refused = file->WriteAt(kBlock + 100, big.data(), big.size());
  INFO(refused.ToString());
  REQUIRE(refused.code() == absl::StatusCode::kResourceExhausted);
  const std::string message(refused.message());
  REQUIRE_THAT(message, Catch::Contains(path));
  REQUIRE_THAT(message, Catch::Contains("memory tier budget"));
  REQUIRE_THAT(message, Catch::Contains(std::to_string(2 * kBlock)));  // held
  REQUIRE_THAT(message, Catch::Contains(std::to_string(3 * kBlock)));  // budget
  REQUIRE(backend.bytes_held() == 2 * kBlock);
  REQUIRE(ReadFile(backend, path) == first);  // block 1 untouched, size unchanged

  // Exactly the room left, then overwrites, which need no new block.
  CKPT_REQUIRE_OK(file->WriteAt(2 * kBlock, big.data(), kBlock));
  REQUIRE(backend.bytes_held() == 3 * kBlock);
  CKPT_REQUIRE_OK(file->WriteAt(100, big.data(), 2 * kBlock));
  REQUIRE(backend.bytes_held() == 3 * kBlock);
  CKPT_REQUIRE_OK(file->Close());

  // Another file finds no room, even for one byte, until the first is gone.
  std::unique_ptr<WritableFile> other = Open(backend, "/tier/b.bin");
  REQUIRE(other->WriteAt(0, "x", 1).code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(backend.bytes_held() == 3 * kBlock);
  CKPT_REQUIRE_OK(backend.RemoveAll(path));
  REQUIRE(backend.bytes_held() == 0);
  CKPT_REQUIRE_OK(other->WriteAt(0, "x", 1));
  REQUIRE(backend.bytes_held() == kBlock);
}

TEST_CASE("memory backend: writers racing for the budget never pass it", "[storage]") {
  // 1-byte blocks and writes: the threads spend their time reserving, so a
  // reservation that is not one atomic step lets some past the budget or
  // loses a count. Many rounds, since a race shows only now and then.
  constexpr int kThreads = 4, kRounds = 50;
  constexpr uint64_t kBudgetBlocks = 5000;
  MemoryBackend backend(MemoryBackendOptions{.budget_bytes = kBudgetBlocks, .block_bytes = 1});
  for (int round = 0; round < kRounds; ++round) {
    CAPTURE(round);
    std::atomic<int> ready{0};
    std::atomic<uint64_t> written_blocks{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        auto file = backend.NewWritableFile("/w-" + std::to_string(t));
        const char byte = static_cast<char>(t);
        // All start together, or the first could take the budget alone.
        ++ready;
        while (ready < kThreads) {
        }
        // One new block a write, until refused; bounded, so a budget that
        // does not hold fails the test instead of taking all memory.
        for (uint64_t i = 0; file.ok() && i < 2 * kBudgetBlocks; ++i) {
          if (!(*file)->WriteAt(i, &byte, 1).ok()) break;
          ++written_blocks;
        }
      });
    }
    for (auto& thread : threads) thread.join();
    REQUIRE(written_blocks == kBudgetBlocks);
    REQUIRE(backend.bytes_held() == kBudgetBlocks);
    CKPT_REQUIRE_OK(backend.RemoveAll("/"));
    REQUIRE(backend.bytes_held() == 0);
  }
}

TEST_CASE("memory backend: bytes_held follows writes, truncation, renames and removals",
          "[storage]") {
  MemoryBackend backend(MemoryBackendOptions{.block_bytes = kBlock});
  CKPT_REQUIRE_OK(backend.CreateDirs("/d/sub"));
  WriteFile(backend, "/d/a", Pattern(10000, 1));  // 3 blocks
  REQUIRE(backend.bytes_held() == 3 * kBlock);

  SECTION("NewWritableFile on an existing path gives the old blocks back") {
    std::unique_ptr<WritableFile> file = Open(backend, "/d/a");
    REQUIRE(backend.bytes_held() == 0);
    CKPT_REQUIRE_OK(file->WriteAt(0, "abc", 3));
    REQUIRE(backend.bytes_held() == kBlock);
    CKPT_REQUIRE_OK(file->Close());
    REQUIRE(ReadFile(backend, "/d/a") == "abc");
  }
  SECTION("even while a reader is open: it sees the file empty, as after O_TRUNC") {
    std::unique_ptr<ReadableFile> reader = OpenReader(backend, "/d/a");
    Open(backend, "/d/a");
    REQUIRE(backend.bytes_held() == 0);
    auto size = reader->Size();
    CKPT_REQUIRE_OK(size);
    REQUIRE(*size == 0);
  }
  SECTION("Rename over a file frees the replaced one's blocks; a directory's stay") {
    const std::string b = Pattern(5000, 2);  // 2 blocks
    WriteFile(backend, "/d/b", b);
    REQUIRE(backend.bytes_held() == 5 * kBlock);
    CKPT_REQUIRE_OK(backend.Rename("/d/b", "/d/a"));
    REQUIRE(backend.bytes_held() == 2 * kBlock);
    REQUIRE(ReadFile(backend, "/d/a") == b);
    CKPT_REQUIRE_OK(backend.Rename("/d", "/e"));
    REQUIRE(backend.bytes_held() == 2 * kBlock);
    REQUIRE(ReadFile(backend, "/e/a") == b);
  }
  SECTION("RemoveAll of a tree frees every file in it") {
    WriteFile(backend, "/d/sub/c", Pattern(kBlock + 1, 3));  // 2 blocks
    WriteFile(backend, "/keep", Pattern(1, 4));              // 1 block
    REQUIRE(backend.bytes_held() == 6 * kBlock);
    CKPT_REQUIRE_OK(backend.RemoveAll("/d"));
    REQUIRE(backend.bytes_held() == kBlock);
    CKPT_REQUIRE_OK(backend.RemoveAll("/keep"));
  }
  SECTION("an open file keeps a removed file's blocks until it is destroyed") {
    const std::string a = ReadFile(backend, "/d/a");
    std::unique_ptr<ReadableFile> reader = OpenReader(backend, "/d/a");
    std::unique_ptr<WritableFile> writer = Open(backend, "/d/w");
    CKPT_REQUIRE_OK(writer->WriteAt(0, "w", 1));
    CKPT_REQUIRE_OK(backend.RemoveAll("/d"));
    REQUIRE(backend.bytes_held() == 4 * kBlock);
    std::string buffer(a.size(), '\0');
    auto n = reader->ReadAt(0, buffer.data(), buffer.size());
    CKPT_REQUIRE_OK(n);
    REQUIRE(buffer == a);
    // A write to the removed file still counts, and goes with it.
    CKPT_REQUIRE_OK(writer->WriteAt(kBlock, "w", 1));
    REQUIRE(backend.bytes_held() == 5 * kBlock);
    CKPT_REQUIRE_OK(writer->Close());
    REQUIRE(backend.bytes_held() == 3 * kBlock);
    reader.reset();
  }
  CKPT_REQUIRE_OK(backend.RemoveAll("/"));
  REQUIRE(backend.bytes_held() == 0);
  // "/" itself stays.
  auto root = backend.ListDir("/");
  CKPT_REQUIRE_OK(root);
  REQUIRE(root->empty());
}

TEST_CASE("memory backend: a shared file is read-only for its taker, taken back when it goes",
          "[storage]") {
  MemoryBackend backend(MemoryBackendOptions{.budget_bytes = 0, .block_bytes = kBlock});
  CKPT_REQUIRE_OK(backend.CreateDirs("/d"));
  const std::string contents = Pattern(3 * kBlock + 17, 7);
  WriteFile(backend, "/d/f", contents);

  auto shared = backend.Share("/d/f");
  CKPT_REQUIRE_OK(shared);
  const MemoryBackend::SharedFile& file = **shared;
  REQUIRE(file.size == contents.size());
  REQUIRE(std::string(file.data, file.size) == contents);

  // Another process's view: the descriptor maps the same bytes, but only
  // for reading.
  REQUIRE(fcntl(file.fd, F_GETFL) != -1);
  REQUIRE((fcntl(file.fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
  REQUIRE(mmap(nullptr, file.size, PROT_READ | PROT_WRITE, MAP_SHARED, file.fd, 0) == MAP_FAILED);
  REQUIRE(ftruncate(file.fd, 0) != 0);
  void* view = mmap(nullptr, file.size, PROT_READ, MAP_SHARED, file.fd, 0);
  REQUIRE(view != MAP_FAILED);
  REQUIRE(std::string(static_cast<const char*>(view), file.size) == contents);
  REQUIRE(mprotect(view, file.size, PROT_READ | PROT_WRITE) != 0);

  // Rewritten: the file takes new memory, and the old is taken back from
  // whoever still maps it (zeros, never a fault, never the new bytes), so a
  // taker that keeps the descriptor pins nothing the budget stopped
  // counting.
  WriteFile(backend, "/d/f", std::string(10, 'x'));
  REQUIRE(ReadFile(backend, "/d/f") == std::string(10, 'x'));
  struct stat st {};
  REQUIRE(fstat(file.fd, &st) == 0);
  CHECK(st.st_blocks == 0);
  const std::string zeros(contents.size(), '\0');
  CHECK(std::string(static_cast<const char*>(view), file.size) == zeros);
  CHECK(std::string(file.data, file.size) == zeros);
  CKPT_REQUIRE_OK(backend.RemoveAll("/d"));
  munmap(view, file.size);

  REQUIRE(absl::IsNotFound(backend.Share("/d/f").status()));
}

TEST_CASE("memory backend: a write to a file already shared lands and moves its change time",
          "[storage]") {
  MemoryBackend backend(MemoryBackendOptions{.budget_bytes = 0, .block_bytes = kBlock});
  CKPT_REQUIRE_OK(backend.CreateDirs("/d"));
  const std::string contents = Pattern(3 * kBlock + 17, 7);
  std::unique_ptr<WritableFile> out = Open(backend, "/d/f");
  CKPT_REQUIRE_OK(out->WriteAt(0, contents.data(), contents.size()));
  auto shared = backend.Share("/d/f");
  CKPT_REQUIRE_OK(shared);
  struct stat before {};
  REQUIRE(fstat((*shared)->fd, &before) == 0);
  // The backend's own mapping is read-only once shared; its writes lift
  // that for their copy, and say so in the file's times (a store through
  // a writable mapping would not: daemon/tier/file_stamp.h).
  CKPT_REQUIRE_OK(out->WriteAt(5, "y", 1));
  CKPT_REQUIRE_OK(out->Close());
  CHECK((*shared)->data[5] == 'y');
  CHECK(ReadFile(backend, "/d/f")[5] == 'y');
  struct stat after {};
  REQUIRE(fstat((*shared)->fd, &after) == 0);
  CHECK(std::make_pair(after.st_ctim.tv_sec, after.st_ctim.tv_nsec) !=
        std::make_pair(before.st_ctim.tv_sec, before.st_ctim.tv_nsec));
}

int OpenDescriptors() {
  int n = 0;
  for (int fd = 0; fd < 65536; ++fd) n += fcntl(fd, F_GETFD) != -1;
  return n;
}

TEST_CASE("memory backend: only large or shared files cost a descriptor", "[storage]") {
  MemoryBackend backend(MemoryBackendOptions{.budget_bytes = 0, .block_bytes = 64 << 10});
  CKPT_REQUIRE_OK(backend.CreateDirs("/d"));
  const int before = OpenDescriptors();
  // A store of many small files (a MANIFEST per step) holds none.
  for (int i = 0; i < 2000; ++i) WriteFile(backend, absl::StrCat("/d/small-", i), "manifest");
  CHECK(OpenDescriptors() == before);
  // A file that grows past a MiB moves into a memfd, bytes intact.
  const std::string head = Pattern(700 << 10, 1);
  const std::string tail = Pattern(900 << 10, 2);
  {
    std::unique_ptr<WritableFile> file = Open(backend, "/d/large");
    CKPT_REQUIRE_OK(file->WriteAt(0, head.data(), head.size()));
    CHECK(OpenDescriptors() == before);
    CKPT_REQUIRE_OK(file->WriteAt(head.size() + 4096, tail.data(), tail.size()));
    CKPT_REQUIRE_OK(file->Close());
  }
  CHECK(OpenDescriptors() == before + 1);
  CHECK(ReadFile(backend, "/d/large") == head + std::string(4096, '\0') + tail);
  // Sharing a small file moves it too; the share holds its own descriptor.
  {
    auto shared = backend.Share("/d/small-7");
    CKPT_REQUIRE_OK(shared);
    CHECK(std::string((*shared)->data, (*shared)->size) == "manifest");
    CHECK(OpenDescriptors() == before + 3);
  }
  CHECK(ReadFile(backend, "/d/small-7") == "manifest");
  CKPT_REQUIRE_OK(backend.RemoveAll("/d"));
  CHECK(OpenDescriptors() == before);
  CHECK(backend.bytes_held() == 0);
}

TEST_CASE("NewMemoryBackend passes its options; block_bytes 0 is the default", "[storage]") {
  std::unique_ptr<Backend> backend =
      NewMemoryBackend(MemoryBackendOptions{.budget_bytes = kBlock, .block_bytes = kBlock});
  std::unique_ptr<WritableFile> file = Open(*backend, "/f");
  CKPT_REQUIRE_OK(file->WriteAt(0, "x", 1));
  REQUIRE(file->WriteAt(kBlock, "x", 1).code() == absl::StatusCode::kResourceExhausted);

  MemoryBackend defaulted(MemoryBackendOptions{.block_bytes = 0});
  WriteFile(defaulted, "/g", "x");
  REQUIRE(defaulted.bytes_held() == MemoryBackendOptions{}.block_bytes);
  REQUIRE(defaulted.budget_bytes() == 0);
}

}  // namespace
}  // namespace ckpt::storage
