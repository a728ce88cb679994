// The fault-injection decorator: each fault fires when armed, says what it
// is, and stays out of the way when off. Run over the memory backend and
// over POSIX files, since it must not depend on what it wraps.
#include "daemon/storage/fault_injection.h"
#include "daemon/storage/backend_factory.h"
#include "tests/catch.h"
#include "tests/unit/daemon/storage/test_util.h"

namespace ckpt::storage {
namespace {

using testing::AlignedBuffer;
using testing::Pattern;
using testing::TempDir;

struct Subject {
  std::unique_ptr<TempDir> temp;
  std::unique_ptr<Backend> inner;
  std::unique_ptr<FaultInjectionBackend> faulty;  // wraps inner, not owning
  std::string root;
};

std::unique_ptr<Subject> MakeSubject(const std::string& kind) {
  auto s = std::make_unique<Subject>();
  if (kind == "memory") {
    s->inner = NewMemoryBackend();
    s->root = "/r";
  } else {
    s->temp = std::make_unique<TempDir>("/tmp");
    s->inner = NewPosixBackend();
    s->root = s->temp->path();
  }
  CKPT_REQUIRE_OK(s->inner->CreateDirs(s->root));
  s->faulty = std::make_unique<FaultInjectionBackend>(s->inner.get());
  return s;
}

#define FOR_EACH_TARGET()                                                  \
  const std::string kind = GENERATE(as<std::string>{}, "memory", "posix"); \
  CAPTURE(kind);                                                           \
  const std::unique_ptr<Subject> subject = MakeSubject(kind);              \
  FaultInjectionBackend& faulty = *subject->faulty;                        \
  [[maybe_unused]] Backend& inner = *subject->inner;                       \
  const std::string& root = subject->root

std::string ReadFile(Backend& backend, const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(backend, path);
  CKPT_REQUIRE_OK(contents);
  return *contents;
}

std::unique_ptr<WritableFile> Open(Backend& backend, const std::string& path) {
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  return *std::move(file);
}

void RequireInjected(const absl::Status& s, absl::StatusCode code,
                     const std::vector<std::string>& parts) {
  INFO(s.ToString());
  REQUIRE(s.code() == code);
  REQUIRE_THAT(std::string(s.message()), Catch::Contains("(injected fault)"));
  for (const std::string& part : parts)
    REQUIRE_THAT(std::string(s.message()), Catch::Contains(part));
}

TEST_CASE("fault: with no faults set, everything passes through", "[storage][fault]") {
  FOR_EACH_TARGET();
  REQUIRE(faulty.Name() == "fault(" + inner.Name() + ")");
  const std::string data = Pattern(20000, 1);
  CKPT_REQUIRE_OK(WriteFileAtomically(faulty, root + "/a", data));
  REQUIRE(ReadFile(inner, root + "/a") == data);  // really in the wrapped backend
  REQUIRE(ReadFile(faulty, root + "/a") == data);
  CKPT_REQUIRE_OK(faulty.CreateDirs(root + "/d/e"));
  auto names = faulty.ListDir(root);
  CKPT_REQUIRE_OK(names);
  REQUIRE(*names == std::vector<std::string>{"a", "d"});
  // Faults set and cleared leave nothing behind.
  faulty.FailAllSyncs(true);
  faulty.FailReads(true);
  faulty.SetWriteBudget(0);
  faulty.CorruptReads(root + "/a");
  faulty.ClearFaults();
  CKPT_REQUIRE_OK(WriteFileAtomically(faulty, root + "/a", data));
  REQUIRE(ReadFile(faulty, root + "/a") == data);
}

TEST_CASE("fault: the n-th sync fails once, with an I/O error naming the file",
          "[storage][fault]") {
  FOR_EACH_TARGET();
  const std::string path = root + "/f";
  auto file = Open(faulty, path);
  CKPT_REQUIRE_OK(file->WriteAt(0, "x", 1));
  faulty.FailNthSync(2);
  CKPT_REQUIRE_OK(file->Sync());
  RequireInjected(file->Sync(), absl::StatusCode::kUnknown,
                  {"fsync " + path, "Input/output error"});
  CKPT_REQUIRE_OK(file->Sync());  // only once
  CKPT_REQUIRE_OK(file->Close());
}

TEST_CASE("fault: every sync, and directory syncs, can fail", "[storage][fault]") {
  FOR_EACH_TARGET();
  faulty.FailAllSyncs(true);
  auto file = Open(faulty, root + "/f");
  for (int i = 0; i < 3; ++i) REQUIRE(file->Sync().code() == absl::StatusCode::kUnknown);
  const absl::Status atomic = WriteFileAtomically(faulty, root + "/LATEST", "1");
  RequireInjected(atomic, absl::StatusCode::kUnknown, {root + "/LATEST"});
  auto exists = inner.Exists(root + "/LATEST");
  CKPT_REQUIRE_OK(exists);
  REQUIRE_FALSE(*exists);  // the commit did not happen
  faulty.FailAllSyncs(false);
  CKPT_REQUIRE_OK(file->Sync());

  faulty.FailSyncDirs(true);
  RequireInjected(faulty.SyncDir(root), absl::StatusCode::kUnknown, {"fsync directory " + root});
  REQUIRE_FALSE(WriteFileAtomically(faulty, root + "/LATEST", "1").ok());
  faulty.FailSyncDirs(false);
  CKPT_REQUIRE_OK(faulty.SyncDir(root));
}

TEST_CASE("fault: writes past the byte budget fail with ENOSPC", "[storage][fault]") {
  FOR_EACH_TARGET();
  const std::string path = root + "/data.bin";
  const std::string data = Pattern(10000, 2);
  faulty.SetWriteBudget(10000);
  auto file = Open(faulty, path);
  CKPT_REQUIRE_OK(file->WriteAt(0, data.data(), 8000));
  RequireInjected(file->WriteAt(8000, data.data() + 8000, 4000),
                  absl::StatusCode::kResourceExhausted,
                  {"pwrite " + path + " at offset 8000", "No space left on device"});
  CKPT_REQUIRE_OK(file->WriteAt(8000, data.data() + 8000, 2000));  // exactly what is left
  REQUIRE_FALSE(file->WriteAt(10000, "y", 1).ok());
  REQUIRE(ReadFile(inner, path) == data);  // the refused writes left no trace

  // In a batch, the ops before the first refused one are written.
  faulty.SetWriteBudget(2500);
  auto batch = Open(faulty, root + "/batch.bin");
  std::vector<IoOp> ops = {{0, const_cast<char*>(data.data()), 1000},
                           {1000, const_cast<char*>(data.data()) + 1000, 1000},
                           {2000, const_cast<char*>(data.data()) + 2000, 1000}};
  RequireInjected(batch->WriteBatch(ops), absl::StatusCode::kResourceExhausted, {"at offset 2000"});
  REQUIRE(ReadFile(inner, root + "/batch.bin") == data.substr(0, 2000));
  faulty.SetWriteBudget(std::nullopt);
  CKPT_REQUIRE_OK(batch->WriteBatch(ops));
  REQUIRE(ReadFile(inner, root + "/batch.bin") == data.substr(0, 3000));
}

TEST_CASE("fault: reads can fail with an I/O error", "[storage][fault]") {
  FOR_EACH_TARGET();
  const std::string path = root + "/r.bin";
  const std::string data = Pattern(8192, 3);
  CKPT_REQUIRE_OK(WriteFileAtomically(faulty, path, data));
  auto reader = faulty.NewReadableFile(path);
  CKPT_REQUIRE_OK(reader);
  faulty.FailReads(true);
  char buffer[100];
  RequireInjected((*reader)->ReadAt(4096, buffer, 100).status(), absl::StatusCode::kUnknown,
                  {"pread " + path + " at offset 4096", "Input/output error"});
  IoOp op{0, buffer, 100};
  REQUIRE((*reader)->ReadBatch({&op, 1}).code() == absl::StatusCode::kUnknown);
  RequireInjected(ReadWholeFile(faulty, path).status(), absl::StatusCode::kUnknown, {path});
  faulty.FailReads(false);
  REQUIRE(ReadFile(faulty, path) == data);
}

// The index of each differing byte, and the XOR there.
std::vector<std::pair<size_t, int>> Diff(const std::string& a, const std::string& b) {
  REQUIRE(a.size() == b.size());
  std::vector<std::pair<size_t, int>> out;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) out.emplace_back(i, (a[i] ^ b[i]) & 0xff);
  }
  return out;
}

TEST_CASE("fault: reads of a path can return one flipped bit", "[storage][fault]") {
  FOR_EACH_TARGET();
  const std::string path = root + "/c.bin", other = root + "/ok.bin";
  const std::string data = Pattern(3 * 4096, 4);
  CKPT_REQUIRE_OK(WriteFileAtomically(faulty, path, data));
  CKPT_REQUIRE_OK(WriteFileAtomically(faulty, other, data));

  faulty.CorruptReads(path, 5000);
  using Flip = std::vector<std::pair<size_t, int>>;
  REQUIRE(Diff(ReadFile(faulty, path), data) == Flip{{5000, 1}});
  REQUIRE(ReadFile(faulty, other) == data);
  REQUIRE(ReadFile(inner, path) == data);  // stored bytes intact

  auto reader = faulty.NewReadableFile(path);
  CKPT_REQUIRE_OK(reader);
  AlignedBuffer a(4096), b(4096);
  std::vector<IoOp> ops = {{0, a.data(), 4096}, {4096, b.data(), 4096}};
  CKPT_REQUIRE_OK((*reader)->ReadBatch(ops));
  REQUIRE(a.str() == data.substr(0, 4096));  // does not cover byte 5000
  REQUIRE(Diff(b.str(), data.substr(4096, 4096)) == Flip{{5000 - 4096, 1}});

  faulty.CorruptReads(path);  // every read's first byte
  auto n = (*reader)->ReadAt(8000, a.data(), 100);
  CKPT_REQUIRE_OK(n);
  REQUIRE(Diff(std::string(a.data(), 100), data.substr(8000, 100)) == Flip{{0, 1}});
}

TEST_CASE("fault: DropUnsyncedData keeps exactly what was synced", "[storage][fault]") {
  FOR_EACH_TARGET();
  const std::string synced_part = Pattern(4096, 5), tail = Pattern(5000, 6),
                    patch = Pattern(100, 7);

  // Synced head, then an unsynced tail and an unsynced overwrite of the head.
  const std::string partial = root + "/partial.bin";
  auto file = Open(faulty, partial);
  CKPT_REQUIRE_OK(file->WriteAt(0, synced_part.data(), synced_part.size()));
  CKPT_REQUIRE_OK(file->Sync());
  CKPT_REQUIRE_OK(file->WriteAt(4096, tail.data(), tail.size()));
  CKPT_REQUIRE_OK(file->WriteAt(10, patch.data(), patch.size()));
  CKPT_REQUIRE_OK(file->Close());

  // Never synced.
  auto never = Open(faulty, root + "/never.bin");
  CKPT_REQUIRE_OK(never->WriteAt(0, tail.data(), tail.size()));
  CKPT_REQUIRE_OK(never->Close());

  // Synced after its last write; then renamed (the commit protocol).
  CKPT_REQUIRE_OK(WriteFileAtomically(faulty, root + "/LATEST", tail));

  // A sync that failed does not count.
  auto failed = Open(faulty, root + "/failed.bin");
  CKPT_REQUIRE_OK(failed->WriteAt(0, tail.data(), tail.size()));
  faulty.FailNthSync(1);
  REQUIRE_FALSE(failed->Sync().ok());
  CKPT_REQUIRE_OK(failed->Close());

  // Existing contents, truncated and rewritten without a sync: back to old.
  const std::string old = Pattern(777, 8);
  {
    auto f = Open(inner, root + "/old.bin");
    CKPT_REQUIRE_OK(f->WriteAt(0, old.data(), old.size()));
    CKPT_REQUIRE_OK(f->Close());
  }
  auto rewrite = Open(faulty, root + "/old.bin");
  CKPT_REQUIRE_OK(rewrite->WriteAt(0, "new", 3));
  CKPT_REQUIRE_OK(rewrite->Close());

  // Not written through the decorator: untouched.
  {
    auto f = Open(inner, root + "/outside.bin");
    CKPT_REQUIRE_OK(f->WriteAt(0, tail.data(), tail.size()));
    CKPT_REQUIRE_OK(f->Close());
  }

  std::string expected_partial = synced_part;
  expected_partial.replace(10, patch.size(), patch);
  expected_partial += tail;
  REQUIRE(ReadFile(inner, partial) == expected_partial);  // before the "crash"

  CKPT_REQUIRE_OK(faulty.DropUnsyncedData());
  REQUIRE(ReadFile(inner, partial) == synced_part);
  REQUIRE(ReadFile(inner, root + "/never.bin").empty());
  REQUIRE(ReadFile(inner, root + "/LATEST") == tail);
  REQUIRE(ReadFile(inner, root + "/failed.bin").empty());
  REQUIRE(ReadFile(inner, root + "/old.bin") == old);
  REQUIRE(ReadFile(inner, root + "/outside.bin") == tail);
  auto names = inner.ListDir(root);
  CKPT_REQUIRE_OK(names);
  REQUIRE(*names == std::vector<std::string>{"LATEST", "failed.bin", "never.bin", "old.bin",
                                             "outside.bin", "partial.bin"});

  // Dropping again changes nothing; data synced later is kept.
  CKPT_REQUIRE_OK(faulty.DropUnsyncedData());
  REQUIRE(ReadFile(inner, partial) == synced_part);
}

TEST_CASE("fault: DropUnsyncedData follows directory renames and removals", "[storage][fault]") {
  FOR_EACH_TARGET();
  const std::string partial = root + "/.step-1.partial", step = root + "/step-1";
  CKPT_REQUIRE_OK(faulty.CreateDirs(partial + "/data"));
  const std::string data = Pattern(9000, 9);
  auto file = Open(faulty, partial + "/data/h-0.bin");
  CKPT_REQUIRE_OK(file->WriteAt(0, data.data(), 4096));
  CKPT_REQUIRE_OK(file->Sync());
  CKPT_REQUIRE_OK(file->WriteAt(4096, data.data() + 4096, 9000 - 4096));
  CKPT_REQUIRE_OK(file->Close());
  auto gone = Open(faulty, partial + "/gone.bin");
  CKPT_REQUIRE_OK(gone->Close());
  CKPT_REQUIRE_OK(faulty.RemoveAll(partial + "/gone.bin"));
  CKPT_REQUIRE_OK(faulty.Rename(partial, step));

  CKPT_REQUIRE_OK(faulty.DropUnsyncedData());
  REQUIRE(ReadFile(inner, step + "/data/h-0.bin") == data.substr(0, 4096));
  auto names = inner.ListDir(step);
  CKPT_REQUIRE_OK(names);
  REQUIRE(*names == std::vector<std::string>{"data"});  // nothing recreated
  auto exists = inner.Exists(partial);
  CKPT_REQUIRE_OK(exists);
  REQUIRE_FALSE(*exists);
}

}  // namespace
}  // namespace ckpt::storage
