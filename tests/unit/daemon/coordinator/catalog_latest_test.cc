// "Latest" is what LATEST says; broken steps are listed as broken and fail
// closed; a LATEST problem after the commit point is repaired, not a failed
// save; chunk reads and verify stay inside the step directory and never hang
// or echo a computed checksum. Real commits; the POSIX cases in a temp dir.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/commit.h"
#include "daemon/coordinator/verify.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/chunk_reader.h"
#include "daemon/storage/layout.h"
#include "proto/lib/crc32c.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

using storage::Backend;

void Write(storage::Backend& backend, const std::string& path, const std::string& contents) {
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteAt(0, contents.data(), contents.size()));
  CKPT_REQUIRE_OK((*file)->Sync());
  CKPT_REQUIRE_OK((*file)->Close());
}

std::string Read(storage::Backend& backend, const std::string& path) {
  absl::StatusOr<std::string> s = storage::ReadWholeFile(backend, path);
  CKPT_REQUIRE_OK(s);
  return *s;
}

bool Exists(storage::Backend& backend, const std::string& path) {
  absl::StatusOr<bool> e = backend.Exists(path);
  CKPT_REQUIRE_OK(e);
  return *e;
}

// A committed step through the real commit protocol.
void CommitStep(storage::Backend& backend, const std::string& root, const std::string& job,
                int64_t step, const std::string& data = "0123456789", uint64_t chunk_bytes = 4) {
  const std::string partial =
      storage::PartialDir(root, job, step, absl::StrCat("h0-00000000000000aa-", step));
  CKPT_REQUIRE_OK(backend.CreateDirs(partial + "/data"));
  Write(backend, partial + "/data/h0-0.bin", data);
  CKPT_REQUIRE_OK(CommitCheckpoint(backend, root, partial,
                                   planning::testing::ManifestOf(job, step, data, chunk_bytes)));
}

int64_t Latest(Catalog& catalog, const std::string& job) {
  absl::StatusOr<int64_t> latest = catalog.ResolveStep(job, -1);
  CKPT_REQUIRE_OK(latest);
  return *latest;
}

// Makes a step's manifest fail its CRC trailer.
void CorruptManifest(storage::Backend& backend, const std::string& root, const std::string& job,
                     int64_t step) {
  const std::string path = storage::StepDir(root, job, step) + "/MANIFEST";
  std::string bytes = Read(backend, path);
  bytes[2] ^= 0x40;
  Write(backend, path, bytes);
}

TEST_CASE("a rollback becomes latest", "[catalog][latest]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Catalog catalog(*backend, "/r");
  CommitStep(*backend, "/r", "job", 100);
  CommitStep(*backend, "/r", "job", 200);
  CHECK(Latest(catalog, "job") == 200);
  // Resumed from 100, the job saves 150 while 200 exists: 150 is latest,
  // and a restart must not go back to the abandoned 200.
  CommitStep(*backend, "/r", "job", 150);
  CHECK(Latest(catalog, "job") == 150);
  CHECK(Read(*backend, "/r/job/LATEST") == "150\n");
  Catalog restarted(*backend, "/r");
  absl::StatusOr<v1::CheckpointManifest> m = restarted.ReadManifest("job", -1);
  CKPT_REQUIRE_OK(m);
  CHECK(m->step() == 150);
  absl::StatusOr<std::vector<v1::CheckpointSummary>> list = restarted.ListCheckpoints("job");
  CKPT_REQUIRE_OK(list);
  REQUIRE(list->size() == 3);
  CHECK((*list)[0].step() == 100);
  CHECK((*list)[1].step() == 150);
  CHECK((*list)[1].latest());
  CHECK_FALSE((*list)[2].latest());
  CHECK((*list)[2].step() == 200);
  CHECK((*list)[2].bytes() == 10);
}

TEST_CASE("without a usable LATEST, latest is the highest valid step", "[catalog][latest]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Catalog catalog(*backend, "/r");
  CommitStep(*backend, "/r", "job", 1);
  CommitStep(*backend, "/r", "job", 3);
  CommitStep(*backend, "/r", "job", 2);  // LATEST = 2
  REQUIRE(Latest(catalog, "job") == 2);

  SECTION("LATEST missing (an old root)") {
    CKPT_REQUIRE_OK(backend->RemoveAll("/r/job/LATEST"));
    CHECK(Latest(catalog, "job") == 3);
  }
  SECTION("LATEST garbage") {
    Write(*backend, "/r/job/LATEST", "three\n");
    CHECK(Latest(catalog, "job") == 3);
  }
  SECTION("LATEST too long to be one") {
    Write(*backend, "/r/job/LATEST", std::string(1 << 20, '7'));
    CHECK(Latest(catalog, "job") == 3);
  }
  SECTION("LATEST names a step that was removed") {
    CKPT_REQUIRE_OK(backend->RemoveAll("/r/job/step-2"));
    CHECK(Latest(catalog, "job") == 3);
  }
  SECTION("the highest step is corrupt") {
    CKPT_REQUIRE_OK(backend->RemoveAll("/r/job/LATEST"));
    CorruptManifest(*backend, "/r", "job", 3);
    CHECK(Latest(catalog, "job") == 2);
  }
  SECTION("every step is corrupt") {
    CKPT_REQUIRE_OK(backend->RemoveAll("/r/job/LATEST"));
    for (int64_t step : {1, 2, 3}) CorruptManifest(*backend, "/r", "job", step);
    CKPT_REQUIRE_ERROR(catalog.ResolveStep("job", -1), absl::StatusCode::kFailedPrecondition,
                       "job job", "is missing", "3 step directories");
  }
}

TEST_CASE("a broken latest fails closed, naming the newest older step that verifies",
          "[catalog][latest]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Catalog catalog(*backend, "/r");
  CommitStep(*backend, "/r", "job", 1);
  CommitStep(*backend, "/r", "job", 2);
  CommitStep(*backend, "/r", "job", 3);
  CommitStep(*backend, "/r", "job", 4);
  CorruptManifest(*backend, "/r", "job", 4);
  // Step 3's manifest is fine but a data file is short: it does not verify.
  Write(*backend, "/r/job/step-3/data/h0-0.bin", "01234");
  // A stray directory above latest is listed, broken, and not latest.
  CKPT_REQUIRE_OK(backend->CreateDirs("/r/job/step-9"));

  CHECK(Latest(catalog, "job") == 4);
  CKPT_REQUIRE_ERROR(catalog.ReadManifest("job", -1), absl::StatusCode::kDataLoss,
                     "latest checkpoint of job job is step 4, which is broken",
                     "/r/job/step-4/MANIFEST", "the newest older step that verifies is 2");
  CKPT_REQUIRE_ERROR(VerifyCheckpoint(*backend, catalog, "job", -1).status(),
                     absl::StatusCode::kDataLoss, "step 4", "is 2");
  // A load's read in columns fails the same way.
  CKPT_REQUIRE_ERROR(catalog.ReadLoadManifest("job", -1), absl::StatusCode::kDataLoss,
                     "latest checkpoint of job job is step 4, which is broken",
                     "/r/job/step-4/MANIFEST", "the newest older step that verifies is 2");
  // By number, step 2 still loads.
  CKPT_REQUIRE_OK(catalog.ReadManifest("job", 2));
  absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> two =
      catalog.ReadLoadManifest("job", 2);
  CKPT_REQUIRE_OK(two);
  CHECK((*two)->header().step() == 2);
  CHECK((*two)->chunks() > 0);

  // The list still works and says what is wrong with each.
  absl::StatusOr<std::vector<v1::CheckpointSummary>> list = catalog.ListCheckpoints("job");
  CKPT_REQUIRE_OK(list);
  REQUIRE(list->size() == 5);
  std::vector<bool> broken;
  for (const auto& c : *list) broken.push_back(c.broken());
  CHECK(broken == std::vector<bool>{false, false, true, true, true});
  CHECK((*list)[2].broken_reason().find("/r/job/step-3/data/h0-0.bin is 5 bytes") !=
        std::string::npos);
  CHECK((*list)[3].broken_reason().find("checksum mismatch") != std::string::npos);
  CHECK((*list)[3].latest());
  CHECK((*list)[4].broken_reason().find("/r/job/step-9/MANIFEST") != std::string::npos);
  CHECK((*list)[1].bytes() == 10);

  // With no older step that verifies, the message says so.
  CorruptManifest(*backend, "/r", "job", 1);
  CorruptManifest(*backend, "/r", "job", 2);
  CKPT_REQUIRE_ERROR(catalog.ReadManifest("job", -1), absl::StatusCode::kDataLoss,
                     "no older step verifies");
}

// Fails creating one file name (LATEST.tmp); forwards everything else.
class FailLatestBackend : public storage::Backend {
 public:
  explicit FailLatestBackend(storage::Backend& target) : target_(target) {}
  bool fail = true;
  std::string Name() const override { return "fail-latest"; }
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> NewWritableFile(
      const std::string& path) override {
    if (fail && path.size() >= 10 && path.substr(path.size() - 10) == "LATEST.tmp") {
      return absl::UnknownError("open " + path + ": Input/output error (injected)");
    }
    return target_.NewWritableFile(path);
  }
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> NewReadableFile(
      const std::string& path) override {
    return target_.NewReadableFile(path);
  }
  absl::Status CreateDirs(const std::string& p) override { return target_.CreateDirs(p); }
  absl::Status SyncDir(const std::string& p) override { return target_.SyncDir(p); }
  absl::Status Rename(const std::string& f, const std::string& t) override {
    return target_.Rename(f, t);
  }
  absl::Status RemoveAll(const std::string& p) override { return target_.RemoveAll(p); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& p) override {
    return target_.ListDir(p);
  }
  absl::StatusOr<bool> Exists(const std::string& p) override { return target_.Exists(p); }

 private:
  storage::Backend& target_;
};

TEST_CASE("a LATEST failure after the commit point is not a failed save", "[catalog][commit]") {
  std::unique_ptr<storage::Backend> inner = storage::NewMemoryBackend();
  FailLatestBackend backend(*inner);
  CommitStep(backend, "/r", "job", 10);  // LATEST could not be written at all
  CHECK_FALSE(Exists(*inner, "/r/job/LATEST"));
  CHECK(Read(*inner, "/r/job/LATEST.next") == "10\n");
  Catalog catalog(backend, "/r");
  CHECK(Latest(catalog, "job") == 10);

  CommitStep(backend, "/r", "job", 20);
  CHECK(Latest(catalog, "job") == 20);
  // A rollback while LATEST is still broken: LATEST.next is what counts.
  CommitStep(backend, "/r", "job", 15);
  CHECK(Latest(catalog, "job") == 15);

  // Storage recovers: the next start-up (or commit) folds it into LATEST.
  backend.fail = false;
  absl::StatusOr<int> removed = catalog.RemoveStalePartials();
  CKPT_REQUIRE_OK(removed);
  CHECK(Read(*inner, "/r/job/LATEST") == "15\n");
  CHECK_FALSE(Exists(*inner, "/r/job/LATEST.next"));
  CHECK(Latest(catalog, "job") == 15);
}

TEST_CASE("a LATEST.next of a commit that never renamed means nothing", "[catalog][commit]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Catalog catalog(*backend, "/r");
  CommitStep(*backend, "/r", "job", 1);
  // A crash between writing LATEST.next and the rename of step 2.
  Write(*backend, "/r/job/LATEST.next", "2\n");
  CHECK(Latest(catalog, "job") == 1);
  Write(*backend, "/r/job/LATEST.next", "garbage");
  CHECK(Latest(catalog, "job") == 1);
  // Clean-up at start-up removes it; LATEST is untouched.
  CKPT_REQUIRE_OK(catalog.RemoveStalePartials());
  CHECK_FALSE(Exists(*backend, "/r/job/LATEST.next"));
  CHECK(Read(*backend, "/r/job/LATEST") == "1\n");
  // And the next commit of step 2 works as usual.
  CommitStep(*backend, "/r", "job", 2);
  CHECK(Latest(catalog, "job") == 2);
}

// ---------------------------------------------------------------------------
// POSIX: chunk reader and verify against hostile data files

class TempRoot {
 public:
  TempRoot() {
    char tmpl[] = "/tmp/ckpt-catalog-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Pattern(size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 131 + 7) & 0xff);
  return out;
}

TEST_CASE("chunk reads refuse what a hostile step directory holds", "[catalog][chunk_reader]") {
  TempRoot root;
  std::unique_ptr<storage::Backend> backend = storage::NewPosixBackend();
  const std::string data = Pattern(3 * 4096);
  CommitStep(*backend, root.path(), "job", 1, data, 4096);
  Catalog catalog(*backend, root.path());
  const std::string step_dir = storage::StepDir(root.path(), "job", 1);
  const std::string file = step_dir + "/data/h0-0.bin";
  absl::StatusOr<v1::CheckpointManifest> m = catalog.ReadManifest("job", 1);
  CKPT_REQUIRE_OK(m);
  const v1::StoredChunk chunk = m->tensors(0).shards(0).chunks(2);  // offset 8192
  std::unique_ptr<char, decltype(&std::free)> buffer(
      static_cast<char*>(std::aligned_alloc(4096, 4096)), &std::free);
  auto read = [&] {
    storage::ChunkReader reader(*backend, step_dir, 4096);
    return reader.Read(chunk, "tensor w", buffer.get());
  };
  CKPT_REQUIRE_OK(read());
  CHECK(std::string(buffer.get(), 4096) == data.substr(8192));

  SECTION("a FIFO as data file fails at once") {
    // With a regression, this hangs in open(2) rather than failing.
    std::filesystem::remove(file);
    REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
    CKPT_REQUIRE_ERROR(read(), absl::StatusCode::kFailedPrecondition, "tensor w", "FIFO");
    CKPT_REQUIRE_ERROR(VerifyCheckpoint(*backend, catalog, "job", 1).status(),
                       absl::StatusCode::kFailedPrecondition, "FIFO");
    absl::StatusOr<std::vector<v1::CheckpointSummary>> list = catalog.ListCheckpoints("job");
    CKPT_REQUIRE_OK(list);
    REQUIRE(list->size() == 1);
    CHECK((*list)[0].broken());
  }
  SECTION("a symlink to a file outside is not followed") {
    const std::string outside = root.path() + "/secret.bin";
    std::ofstream(outside) << data;  // same bytes: only the link can fail it
    std::filesystem::remove(file);
    std::filesystem::create_symlink(outside, file);
    CKPT_REQUIRE_ERROR(read(), absl::StatusCode::kFailedPrecondition, "symbolic link");
    CKPT_REQUIRE_ERROR(VerifyCheckpoint(*backend, catalog, "job", 1).status(),
                       absl::StatusCode::kFailedPrecondition, "symbolic link");
  }
  SECTION("a symlinked data directory is not followed") {
    const std::string outside = root.path() + "/elsewhere";
    std::filesystem::rename(step_dir + "/data", outside);
    std::filesystem::create_directory_symlink(outside, step_dir + "/data");
    CKPT_REQUIRE_ERROR(read(), absl::StatusCode::kFailedPrecondition, step_dir + "/data");
  }
  SECTION("a short file is DATA_LOSS naming file and offset") {
    std::filesystem::resize_file(file, 8192 + 100);
    CKPT_REQUIRE_ERROR(read(), absl::StatusCode::kDataLoss, file, "offset 8192", "8292 bytes");
    CKPT_REQUIRE_ERROR(VerifyCheckpoint(*backend, catalog, "job", 1).status(),
                       absl::StatusCode::kDataLoss, file, "offset 8192");
  }
  SECTION("a mismatch names the expected CRC, never the computed one") {
    std::string bad = data;
    bad[8192 + 5] ^= 0x01;
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bad;
    const uint32_t computed = Crc32c(bad.data() + 8192, 4096);
    REQUIRE(computed != chunk.crc32c());
    for (const absl::Status& s : {read(), VerifyCheckpoint(*backend, catalog, "job", 1).status()}) {
      INFO(s.ToString());
      CHECK(absl::IsDataLoss(s));
      CHECK(s.message().find("checksum mismatch") != absl::string_view::npos);
      CHECK(s.message().find(absl::StrFormat("%08x", chunk.crc32c())) != absl::string_view::npos);
      CHECK(s.message().find(absl::StrFormat("%08x", computed)) == absl::string_view::npos);
      CHECK(s.message().find(absl::StrFormat("%08X", computed)) == absl::string_view::npos);
    }
  }
}

TEST_CASE("verify reads a chunk of any size in bounded pieces", "[catalog][verify]") {
  TempRoot root;
  std::unique_ptr<storage::Backend> backend = storage::NewPosixBackend();
  // One 5-piece chunk (pieces of 4 KiB here), and a tail that is not a whole piece.
  const std::string data = Pattern(5 * 4096 + 123);
  CommitStep(*backend, root.path(), "job", 1, data, data.size());
  Catalog catalog(*backend, root.path());
  absl::StatusOr<VerifyResult> ok = VerifyCheckpoint(*backend, catalog, "job", -1, 4096);
  CKPT_REQUIRE_OK(ok);
  CHECK(ok->step == 1);
  CHECK(ok->chunks == 1);
  CHECK(ok->bytes == data.size());

  // A flip in the last piece is found.
  std::string bad = data;
  bad[data.size() - 1] ^= 0x10;
  std::ofstream(storage::StepDir(root.path(), "job", 1) + "/data/h0-0.bin",
                std::ios::binary | std::ios::trunc)
      << bad;
  CKPT_REQUIRE_ERROR(VerifyCheckpoint(*backend, catalog, "job", 1, 4096).status(),
                     absl::StatusCode::kDataLoss, "checksum mismatch", "offset 0", "tensor w");
}

TEST_CASE("verify uses the directory asked for, not one the manifest names", "[catalog][verify]") {
  TempRoot root;
  std::unique_ptr<storage::Backend> backend = storage::NewPosixBackend();
  CommitStep(*backend, root.path(), "good", 1, Pattern(4096), 4096);
  // A copy of the good checkpoint under another job whose data is damaged:
  // its manifest names job "good", so it must not verify as if it were there.
  std::filesystem::create_directories(root.path() + "/copy");
  std::filesystem::copy(storage::StepDir(root.path(), "good", 1),
                        storage::StepDir(root.path(), "copy", 1),
                        std::filesystem::copy_options::recursive);
  std::ofstream(storage::StepDir(root.path(), "copy", 1) + "/data/h0-0.bin", std::ios::trunc)
      << "junk";
  Catalog catalog(*backend, root.path());
  CKPT_REQUIRE_OK(VerifyCheckpoint(*backend, catalog, "good", 1));
  CKPT_REQUIRE_ERROR(VerifyCheckpoint(*backend, catalog, "copy", 1).status(),
                     absl::StatusCode::kFailedPrecondition, "/copy/step-1/MANIFEST",
                     "not of job copy step 1");
}

}  // namespace
}  // namespace ckpt::coordinator
