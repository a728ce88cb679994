// One conformance suite, run against every backend: the in-memory reference,
// POSIX with io_uring + O_DIRECT on disk, POSIX with pread/pwrite, POSIX on
// tmpfs (O_DIRECT refused -> buffered), and the fault-injection decorator
// with no faults set (it must pass everything through), and S3 on a real
// server (Swift's s3api, tests/support/s3_server.h), where object stores
// have no directories: an empty one does not exist, a directory cannot be
// renamed, and a file can be written where a "directory" is.
#include <algorithm>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "daemon/storage/backend.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/fault_injection.h"
#include "tests/catch.h"
#include "tests/support/s3_server.h"
#include "tests/unit/daemon/storage/test_util.h"

namespace ckpt::storage {
namespace {

using testing::AlignedBuffer;
using testing::Pattern;
using testing::TempDir;

// A backend and a directory it may use freely.
struct Subject {
  std::unique_ptr<TempDir> temp;  // posix only
  std::unique_ptr<Backend> backend;
  std::string root;
  bool has_directories = true;
};

std::unique_ptr<Subject> MakeSubject(const std::string& kind) {
  auto s = std::make_unique<Subject>();
  auto posix = [&](const std::string& base, PosixBackendOptions options) {
    s->temp = std::make_unique<TempDir>(base);
    s->root = s->temp->path();
    return NewPosixBackend(options);
  };
  if (kind == "memory") {
    s->backend = NewMemoryBackend();
    s->root = "/root";
  } else if (kind == "posix io_uring+O_DIRECT /tmp") {
    s->backend = posix("/tmp", PosixBackendOptions{});
  } else if (kind == "posix pread/pwrite /tmp") {
    s->backend = posix("/tmp", PosixBackendOptions{.use_io_uring = false});
  } else if (kind == "posix /dev/shm") {
    s->backend = posix("/dev/shm", PosixBackendOptions{});
  } else if (kind == "fault(memory), no faults") {
    s->backend = std::make_unique<FaultInjectionBackend>(NewMemoryBackend());
    s->root = "/root";
  } else if (kind == "s3 (swift s3api)") {
    static const std::string bucket = ckpt::testing::NewTestBucket("conformance");
    s3::S3BackendOptions options;
    options.client = ckpt::testing::TestS3ClientOptions();
    options.bucket = bucket;
    options.part_bytes = 5 << 20;  // S3's smallest: more parts per file
    auto backend = s3::NewS3Backend(options);
    CKPT_REQUIRE_OK(backend);
    s->backend = std::move(*backend);
    static int subjects = 0;
    s->root = "s3://" + bucket + "/t" + std::to_string(subjects++);
    s->has_directories = false;
  } else if (kind == "fault(posix), no faults") {
    s->backend = std::make_unique<FaultInjectionBackend>(posix("/tmp", PosixBackendOptions{}));
  } else {
    FAIL("unknown backend kind " << kind);
  }
  CKPT_REQUIRE_OK(s->backend->CreateDirs(s->root));
  return s;
}

#define FOR_EACH_BACKEND()                                                              \
  const std::string kind =                                                              \
      GENERATE(as<std::string>{}, "memory", "posix io_uring+O_DIRECT /tmp",             \
               "posix pread/pwrite /tmp", "posix /dev/shm", "fault(memory), no faults", \
               "fault(posix), no faults", "s3 (swift s3api)");                          \
  CAPTURE(kind);                                                                        \
  const std::unique_ptr<Subject> subject = MakeSubject(kind);                           \
  Backend& backend = *subject->backend;                                                 \
  const std::string& root = subject->root

void WriteFile(Backend& backend, const std::string& path, const std::string& contents) {
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteAt(0, contents.data(), contents.size()));
  CKPT_REQUIRE_OK((*file)->Sync());
  CKPT_REQUIRE_OK((*file)->Close());
}

std::string ReadFile(Backend& backend, const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(backend, path);
  CKPT_REQUIRE_OK(contents);
  return *contents;
}

std::vector<std::string> List(Backend& backend, const std::string& path) {
  auto names = backend.ListDir(path);
  CKPT_REQUIRE_OK(names);
  return *names;
}

bool Exists(Backend& backend, const std::string& path) {
  auto exists = backend.Exists(path);
  CKPT_REQUIRE_OK(exists);
  return *exists;
}

// Writes src into the model the way a file grows: holes read as zeros.
void ApplyToModel(std::string& model, uint64_t offset, const std::string& src) {
  if (model.size() < offset + src.size()) model.resize(offset + src.size(), '\0');
  model.replace(offset, src.size(), src);
}

TEST_CASE("round trip with aligned and unaligned offsets, lengths and buffers", "[storage]") {
  FOR_EACH_BACKEND();
  const std::string path = root + "/f.bin";
  struct Case {
    uint64_t offset;
    size_t length;
    size_t buffer_shift;  // 0: 4096-aligned buffer
  };
  const std::vector<Case> cases = {
      {0, 65536, 0},      // all aligned: O_DIRECT where there is one
      {65536, 4096, 0},   // one aligned page
      {69632, 8192, 1},   // aligned offset and length, unaligned buffer
      {81921, 10000, 0},  // unaligned offset and length
      {1000000, 123, 3},  // unaligned everything, leaves a hole before it
      {4096, 4096, 0},    // overwrite inside the file
      {100, 50, 0},       // small overwrite, unaligned
  };
  std::string model;
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    CAPTURE(i, c.offset, c.length, c.buffer_shift);
    const std::string data = Pattern(c.length, i + 1);
    AlignedBuffer buffer(c.length + c.buffer_shift);
    std::memcpy(buffer.data() + c.buffer_shift, data.data(), c.length);
    CKPT_REQUIRE_OK((*file)->WriteAt(c.offset, buffer.data() + c.buffer_shift, c.length));
    ApplyToModel(model, c.offset, data);
  }
  CKPT_REQUIRE_OK((*file)->Sync());
  CKPT_REQUIRE_OK((*file)->Close());

  REQUIRE(ReadFile(backend, path) == model);

  auto reader = backend.NewReadableFile(path);
  CKPT_REQUIRE_OK(reader);
  auto size = (*reader)->Size();
  CKPT_REQUIRE_OK(size);
  REQUIRE(*size == model.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    for (size_t shift : {size_t{0}, size_t{1}}) {
      const Case& c = cases[i];
      CAPTURE(i, shift);
      AlignedBuffer buffer(c.length + shift);
      auto n = (*reader)->ReadAt(c.offset, buffer.data() + shift, c.length);
      CKPT_REQUIRE_OK(n);
      REQUIRE(*n == c.length);
      REQUIRE(std::string(buffer.data() + shift, c.length) == model.substr(c.offset, c.length));
    }
  }
}

TEST_CASE("WriteBatch and ReadBatch with many ops are bit-exact", "[storage]") {
  FOR_EACH_BACKEND();
  const std::string path = root + "/batch.bin";
  constexpr size_t kOps = 100;  // more than the queue depth (32)
  constexpr size_t kSlot = 80 * 1024;
  std::vector<size_t> slots(kOps);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), std::mt19937(7));

  // Mostly aligned 64 KiB ops; every 7th starts unaligned, every 5th is
  // shorter by an odd amount: both paths in one batch.
  std::vector<std::unique_ptr<AlignedBuffer>> buffers;
  std::vector<IoOp> ops;
  std::string model;
  for (size_t i = 0; i < kOps; ++i) {
    const uint64_t offset = slots[i] * kSlot + (i % 7 == 0 ? 123 : 0);
    const size_t length = 65536 - (i % 5 == 0 ? 17 : 0);
    const std::string data = Pattern(length, 1000 + i);
    buffers.push_back(std::make_unique<AlignedBuffer>(length));
    std::memcpy(buffers.back()->data(), data.data(), length);
    ops.push_back(IoOp{offset, buffers.back()->data(), length});
    ApplyToModel(model, offset, data);
  }
  {
    auto file = backend.NewWritableFile(path);
    CKPT_REQUIRE_OK(file);
    CKPT_REQUIRE_OK((*file)->WriteBatch(ops));
    CKPT_REQUIRE_OK((*file)->Sync());
    CKPT_REQUIRE_OK((*file)->Close());
  }
  REQUIRE(ReadFile(backend, path) == model);

  // Read every op back into fresh buffers, in a different order.
  std::vector<std::unique_ptr<AlignedBuffer>> in;
  std::vector<IoOp> read_ops;
  for (size_t k = 0; k < kOps; ++k) {
    const IoOp& w = ops[(k * 37) % kOps];
    in.push_back(std::make_unique<AlignedBuffer>(w.length));
    std::memset(in.back()->data(), 0xee, w.length);
    read_ops.push_back(IoOp{w.offset, in.back()->data(), w.length});
  }
  auto reader = backend.NewReadableFile(path);
  CKPT_REQUIRE_OK(reader);
  CKPT_REQUIRE_OK((*reader)->ReadBatch(read_ops));
  for (size_t k = 0; k < kOps; ++k) {
    CAPTURE(k);
    const IoOp& r = read_ops[k];
    REQUIRE(std::string(static_cast<char*>(r.buffer), r.length) ==
            model.substr(r.offset, r.length));
  }
}

TEST_CASE("ReadAt is short only at end of file", "[storage]") {
  FOR_EACH_BACKEND();
  const std::string path = root + "/short.bin";
  const std::string data = Pattern(10000, 3);  // not a multiple of 4096
  WriteFile(backend, path, data);
  auto reader = backend.NewReadableFile(path);
  CKPT_REQUIRE_OK(reader);
  AlignedBuffer buffer(16384);

  // Aligned request over EOF (O_DIRECT returns a short count, then the tail
  // must not be mistaken for an error).
  auto n = (*reader)->ReadAt(8192, buffer.data(), 4096);
  CKPT_REQUIRE_OK(n);
  REQUIRE(*n == 10000 - 8192);
  REQUIRE(std::string(buffer.data(), *n) == data.substr(8192));

  n = (*reader)->ReadAt(0, buffer.data(), 16384);
  CKPT_REQUIRE_OK(n);
  REQUIRE(*n == 10000);
  REQUIRE(std::string(buffer.data(), *n) == data);

  n = (*reader)->ReadAt(9999, buffer.data() + 1, 100);
  CKPT_REQUIRE_OK(n);
  REQUIRE(*n == 1);
  REQUIRE(buffer.data()[1] == data[9999]);

  for (uint64_t offset : {uint64_t{10000}, uint64_t{12288}, uint64_t{1} << 40}) {
    CAPTURE(offset);
    n = (*reader)->ReadAt(offset, buffer.data(), 4096);
    CKPT_REQUIRE_OK(n);
    REQUIRE(*n == 0);
  }
  n = (*reader)->ReadAt(0, buffer.data(), 0);
  CKPT_REQUIRE_OK(n);
  REQUIRE(*n == 0);
}

TEST_CASE("ReadBatch past end of file is DATA_LOSS naming the file", "[storage]") {
  FOR_EACH_BACKEND();
  const std::string path = root + "/eof.bin";
  WriteFile(backend, path, Pattern(10000, 4));
  auto reader = backend.NewReadableFile(path);
  CKPT_REQUIRE_OK(reader);
  AlignedBuffer a(4096), b(4096);
  std::vector<IoOp> ops = {{0, a.data(), 4096}, {8192, b.data(), 4096}};
  const absl::Status s = (*reader)->ReadBatch(ops);
  INFO(s.ToString());
  REQUIRE(s.code() == absl::StatusCode::kDataLoss);
  REQUIRE_THAT(std::string(s.message()), Catch::Contains(path));

  ops = {{10000, a.data(), 1}};
  REQUIRE((*reader)->ReadBatch(ops).code() == absl::StatusCode::kDataLoss);
  ops = {{4096, a.data(), 4096}, {0, b.data(), 4096}};
  CKPT_REQUIRE_OK((*reader)->ReadBatch(ops));
}

TEST_CASE("missing paths are NOT_FOUND, naming the path", "[storage]") {
  FOR_EACH_BACKEND();
  const std::string missing = root + "/missing.bin";
  auto reader = backend.NewReadableFile(missing);
  REQUIRE(reader.status().code() == absl::StatusCode::kNotFound);
  REQUIRE_THAT(std::string(reader.status().message()), Catch::Contains(missing));

  if (subject->has_directories) {
    auto writer = backend.NewWritableFile(root + "/no-dir/x.bin");
    REQUIRE(writer.status().code() == absl::StatusCode::kNotFound);
    REQUIRE_THAT(std::string(writer.status().message()), Catch::Contains(root + "/no-dir/x.bin"));
    REQUIRE(backend.ListDir(root + "/no-dir").status().code() == absl::StatusCode::kNotFound);
    REQUIRE(backend.SyncDir(root + "/no-dir").code() == absl::StatusCode::kNotFound);
  }
  REQUIRE(backend.Rename(missing, root + "/y").code() == absl::StatusCode::kNotFound);
  REQUIRE_FALSE(Exists(backend, missing));
  REQUIRE_FALSE(Exists(backend, root + "/no-dir/x.bin"));
  CKPT_REQUIRE_OK(backend.RemoveAll(missing));
  REQUIRE(ReadWholeFile(backend, missing).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("CreateDirs makes nested directories and ListDir lists sorted names", "[storage]") {
  FOR_EACH_BACKEND();
  CKPT_REQUIRE_OK(backend.CreateDirs(root + "/a/b/c"));
  CKPT_REQUIRE_OK(backend.CreateDirs(root + "/a/b/c"));  // exists: OK
  CKPT_REQUIRE_OK(backend.CreateDirs(root + "/a/b2"));
  if (!subject->has_directories) {  // directories exist by their files
    WriteFile(backend, root + "/a/b/c/f", "f");
    WriteFile(backend, root + "/a/b2/f", "f");
  }
  WriteFile(backend, root + "/a/z.bin", "z");
  WriteFile(backend, root + "/a/m", "m");
  WriteFile(backend, root + "/a/B", "B");
  CKPT_REQUIRE_OK(backend.SyncDir(root + "/a"));

  REQUIRE(List(backend, root) == std::vector<std::string>{"a"});
  REQUIRE(List(backend, root + "/a") == std::vector<std::string>{"B", "b", "b2", "m", "z.bin"});
  REQUIRE(List(backend, root + "/a/b") == std::vector<std::string>{"c"});
  REQUIRE(Exists(backend, root + "/a/b/c"));
  REQUIRE(Exists(backend, root + "/a/m"));
  REQUIRE_FALSE(backend.NewReadableFile(root + "/a/b").ok());  // a directory
  if (!subject->has_directories) return;
  REQUIRE(List(backend, root + "/a/b/c").empty());

  // A file in the way is an error, not silently a directory.
  REQUIRE_FALSE(backend.CreateDirs(root + "/a/m").ok());
  REQUIRE_FALSE(backend.CreateDirs(root + "/a/m/sub").ok());
  REQUIRE_FALSE(backend.ListDir(root + "/a/m").ok());
  REQUIRE_FALSE(backend.NewWritableFile(root + "/a/b").ok());  // a directory
}

TEST_CASE("Rename replaces an existing file", "[storage]") {
  FOR_EACH_BACKEND();
  WriteFile(backend, root + "/LATEST", "old contents, longer");
  WriteFile(backend, root + "/LATEST.new", "new");
  CKPT_REQUIRE_OK(backend.Rename(root + "/LATEST.new", root + "/LATEST"));
  CKPT_REQUIRE_OK(backend.SyncDir(root));
  REQUIRE(ReadFile(backend, root + "/LATEST") == "new");
  REQUIRE_FALSE(Exists(backend, root + "/LATEST.new"));
  REQUIRE(List(backend, root) == std::vector<std::string>{"LATEST"});
  // Renaming onto itself changes nothing.
  CKPT_REQUIRE_OK(backend.Rename(root + "/LATEST", root + "/LATEST"));
  REQUIRE(ReadFile(backend, root + "/LATEST") == "new");
}

TEST_CASE("Rename moves a directory with its contents", "[storage]") {
  FOR_EACH_BACKEND();
  if (!subject->has_directories) {
    WriteFile(backend, root + "/d/f", "f");
    REQUIRE(backend.Rename(root + "/d", root + "/e").code() == absl::StatusCode::kUnimplemented);
    return;
  }
  const std::string partial = root + "/job/.step-7.partial-x";
  const std::string step = root + "/job/step-7";
  CKPT_REQUIRE_OK(backend.CreateDirs(partial + "/data/deep"));
  const std::string manifest = Pattern(333, 8), data = Pattern(70000, 9);
  WriteFile(backend, partial + "/MANIFEST", manifest);
  WriteFile(backend, partial + "/data/h-0.bin", data);

  CKPT_REQUIRE_OK(backend.Rename(partial, step));
  CKPT_REQUIRE_OK(backend.SyncDir(root + "/job"));
  REQUIRE_FALSE(Exists(backend, partial));
  REQUIRE_FALSE(Exists(backend, partial + "/MANIFEST"));
  REQUIRE(List(backend, root + "/job") == std::vector<std::string>{"step-7"});
  REQUIRE(List(backend, step) == std::vector<std::string>{"MANIFEST", "data"});
  REQUIRE(List(backend, step + "/data") == std::vector<std::string>{"deep", "h-0.bin"});
  REQUIRE(ReadFile(backend, step + "/MANIFEST") == manifest);
  REQUIRE(ReadFile(backend, step + "/data/h-0.bin") == data);

  // Onto an empty directory: replaced. Onto a non-empty one: refused.
  CKPT_REQUIRE_OK(backend.CreateDirs(root + "/job/empty"));
  CKPT_REQUIRE_OK(backend.Rename(step, root + "/job/empty"));
  REQUIRE(ReadFile(backend, root + "/job/empty/MANIFEST") == manifest);
  CKPT_REQUIRE_OK(backend.CreateDirs(root + "/job/other/x"));
  REQUIRE_FALSE(backend.Rename(root + "/job/empty", root + "/job/other").ok());
  REQUIRE(ReadFile(backend, root + "/job/empty/data/h-0.bin") == data);
}

TEST_CASE("RemoveAll removes a tree, a file, or nothing", "[storage]") {
  FOR_EACH_BACKEND();
  CKPT_REQUIRE_OK(backend.CreateDirs(root + "/t/a/b"));
  CKPT_REQUIRE_OK(backend.CreateDirs(root + "/t2"));
  WriteFile(backend, root + "/t/f", "1");
  WriteFile(backend, root + "/t/a/g", "2");
  WriteFile(backend, root + "/t/a/b/h", "3");
  WriteFile(backend, root + "/t2/keep", "4");
  WriteFile(backend, root + "/t-sibling", "5");  // shares the prefix "t"

  CKPT_REQUIRE_OK(backend.RemoveAll(root + "/t"));
  REQUIRE_FALSE(Exists(backend, root + "/t"));
  REQUIRE_FALSE(Exists(backend, root + "/t/a/b/h"));
  REQUIRE(List(backend, root) == std::vector<std::string>{"t-sibling", "t2"});
  REQUIRE(ReadFile(backend, root + "/t2/keep") == "4");
  CKPT_REQUIRE_OK(backend.RemoveAll(root + "/t"));  // already gone: OK

  CKPT_REQUIRE_OK(backend.RemoveAll(root + "/t-sibling"));
  REQUIRE(List(backend, root) == std::vector<std::string>{"t2"});
}

TEST_CASE("WriteFileAtomically and ReadWholeFile", "[storage]") {
  FOR_EACH_BACKEND();
  const std::string path = root + "/LATEST";
  CKPT_REQUIRE_OK(WriteFileAtomically(backend, path, "step-1"));
  REQUIRE(ReadFile(backend, path) == "step-1");
  const std::string big = Pattern(100000, 5);
  CKPT_REQUIRE_OK(WriteFileAtomically(backend, path, big));
  REQUIRE(ReadFile(backend, path) == big);
  CKPT_REQUIRE_OK(WriteFileAtomically(backend, path, "s2"));  // shorter: no stale tail
  REQUIRE(ReadFile(backend, path) == "s2");
  CKPT_REQUIRE_OK(WriteFileAtomically(backend, path, ""));
  REQUIRE(ReadFile(backend, path).empty());
  REQUIRE(List(backend, root) == std::vector<std::string>{"LATEST"});  // no .tmp left
  if (!subject->has_directories) return;

  const absl::Status s = WriteFileAtomically(backend, root + "/no-dir/LATEST", "x");
  REQUIRE(s.code() == absl::StatusCode::kNotFound);
  REQUIRE_THAT(std::string(s.message()), Catch::Contains(root + "/no-dir/LATEST"));
}

TEST_CASE("a new writable file truncates; a closed one refuses writes", "[storage]") {
  FOR_EACH_BACKEND();
  const std::string path = root + "/trunc.bin";
  WriteFile(backend, path, Pattern(10000, 6));
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteAt(0, "abc", 3));
  CKPT_REQUIRE_OK((*file)->Close());
  REQUIRE(ReadFile(backend, path) == "abc");
  REQUIRE((*file)->WriteAt(0, "abc", 3).code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE((*file)->Sync().code() == absl::StatusCode::kFailedPrecondition);
  CKPT_REQUIRE_OK((*file)->Close());  // twice: harmless
}

TEST_CASE("a 32 MiB file round trips", "[storage]") {
  FOR_EACH_BACKEND();
  const std::string path = root + "/large.bin";
  constexpr size_t kSize = 32 << 20, kChunk = 4 << 20;
  AlignedBuffer out(kSize);
  const std::string data = Pattern(kSize, 10);
  std::memcpy(out.data(), data.data(), kSize);
  std::vector<IoOp> ops;
  for (size_t off = 0; off < kSize; off += kChunk) ops.push_back({off, out.data() + off, kChunk});
  std::reverse(ops.begin(), ops.end());
  {
    auto file = backend.NewWritableFile(path);
    CKPT_REQUIRE_OK(file);
    CKPT_REQUIRE_OK((*file)->WriteBatch(ops));
    CKPT_REQUIRE_OK((*file)->Sync());
    CKPT_REQUIRE_OK((*file)->Close());
  }
  auto reader = backend.NewReadableFile(path);
  CKPT_REQUIRE_OK(reader);
  auto size = (*reader)->Size();
  CKPT_REQUIRE_OK(size);
  REQUIRE(*size == kSize);
  AlignedBuffer in(kSize);
  IoOp whole{0, in.data(), kSize};
  CKPT_REQUIRE_OK((*reader)->ReadBatch({&whole, 1}));
  REQUIRE(std::memcmp(in.data(), data.data(), kSize) == 0);
  REQUIRE(ReadFile(backend, path) == data);
}

TEST_CASE("threads write their own files concurrently", "[storage]") {
  FOR_EACH_BACKEND();
  constexpr int kThreads = 4, kOps = 40;
  constexpr size_t kLen = 16384;
  std::vector<absl::Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer buffer(kLen * kOps);
      const std::string data = Pattern(kLen * kOps, 100 + t);
      std::memcpy(buffer.data(), data.data(), data.size());
      std::vector<IoOp> ops;
      for (int i = kOps - 1; i >= 0; --i) ops.push_back({i * kLen, buffer.data() + i * kLen, kLen});
      auto file = backend.NewWritableFile(root + "/w-" + std::to_string(t));
      absl::Status s = file.status();
      if (s.ok()) s = (*file)->WriteBatch(ops);
      if (s.ok()) s = (*file)->Sync();
      if (s.ok()) s = (*file)->Close();
      results[t] = s;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CKPT_REQUIRE_OK(results[t]);
    REQUIRE(ReadFile(backend, root + "/w-" + std::to_string(t)) == Pattern(kLen * kOps, 100 + t));
  }
}

// Garbage collection relies on these (daemon/coordinator/retention.h): a
// shared lock (a load's pin) keeps an exclusive try-lock (gc) out, and a
// holder whose file was renamed away while it waited learns so.
TEST_CASE("LockFile: shared locks exclude an exclusive one; missing and moved files", "[storage]") {
  FOR_EACH_BACKEND();
  const std::string path = root + "/MANIFEST";
  WriteFile(backend, path, "m");
  CHECK(backend.LockFile(root + "/none", LockMode::kShared, true).status().code() ==
        absl::StatusCode::kNotFound);
  {
    auto a = backend.LockFile(path, LockMode::kShared, true);
    auto b = backend.LockFile(path, LockMode::kShared, false);
    CKPT_REQUIRE_OK(a);
    CKPT_REQUIRE_OK(b);
    auto busy = backend.LockFile(path, LockMode::kExclusive, false);
    CHECK(busy.status().code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(busy.status().message()), Catch::Contains(path));
  }
  {
    auto x = backend.LockFile(path, LockMode::kExclusive, false);
    CKPT_REQUIRE_OK(x);
    CHECK(backend.LockFile(path, LockMode::kShared, false).status().code() ==
          absl::StatusCode::kUnavailable);
    // A reader waits for the exclusive holder, which renames the file away.
    absl::StatusOr<std::unique_ptr<FileLock>> waited;
    std::thread reader([&] { waited = backend.LockFile(path, LockMode::kShared, true); });
    CKPT_REQUIRE_OK(backend.Rename(path, root + "/moved"));
    x->reset();
    reader.join();
    CHECK(waited.status().code() == absl::StatusCode::kNotFound);
  }
  CKPT_REQUIRE_OK(backend.LockFile(root + "/moved", LockMode::kExclusive, false));
}

}  // namespace
}  // namespace ckpt::storage
