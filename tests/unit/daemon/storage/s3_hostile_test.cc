// The S3 client and backend against a server that misbehaves on purpose
// (tests/support/hostile_s3.py): a header that looks like a status line,
// short or misplaced ranges, listings outside their prefix, endless or
// absurd listings, and a commit object stored with its answer lost. ckpt
// must fail named or get it right, never return wrong bytes, crash or hang,
// and a commit whose answer was lost is still a commit.
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/coordinator/commit.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/s3/s3_backend.h"
#include "daemon/storage/step_location.h"
#include "tests/catch.h"
#include "tests/support/s3_server.h"
#include "tests/support/subprocess.h"
#include "tests/unit/daemon/storage/test_util.h"

namespace ckpt::storage::s3 {
namespace {

using ckpt::testing::SourcePath;
using ckpt::testing::Subprocess;
using testing::Pattern;

struct Hostile {
  std::unique_ptr<Subprocess> server;
  std::unique_ptr<S3Backend> backend;

  explicit Hostile(const std::string& mode) {
    ckpt::testing::LocalServer local = ckpt::testing::StartLocalServer(
        {"/usr/bin/python3", SourcePath("tests/support/hostile_s3.py"), mode});
    server = std::move(local.process);
    S3BackendOptions options;
    options.client.endpoint = local.endpoint;
    options.client.credentials = {"key", "secret", ""};
    options.client.retry.deadline = absl::Seconds(5);
    options.client.retry.base_delay = absl::Milliseconds(5);
    options.bucket = "hostile";
    options.part_bytes = 5 << 20;
    auto made = NewS3Backend(options);
    CKPT_REQUIRE_OK(made);
    backend = std::move(*made);
  }

  std::string Put(const std::string& name, const std::string& data) {
    const std::string path = "s3://hostile/" + name;
    auto file = backend->NewWritableFile(path);
    CKPT_REQUIRE_OK(file);
    CKPT_REQUIRE_OK((*file)->WriteAt(0, data.data(), data.size()));
    CKPT_REQUIRE_OK((*file)->Close());
    return path;
  }
};

// Reads [offset, offset + n) of path: OK only with exactly the right bytes.
void ReadIsRightOrFails(S3Backend& backend, const std::string& path, const std::string& data,
                        uint64_t offset, size_t n) {
  auto file = backend.NewReadableFile(path);
  CKPT_REQUIRE_OK(file);
  std::string got(n, '\x55');
  IoOp op{offset, got.data(), n};
  const absl::Status s = (*file)->ReadBatch({&op, 1});
  INFO(s.ToString());
  if (s.ok()) {
    REQUIRE(got == data.substr(offset, n));
  } else {
    CHECK_THAT(std::string(s.message()), Catch::Contains(path));
  }
}

TEST_CASE("S3 hostile: a header named like a status line never moves the bytes", "[s3]") {
  Hostile h("desync");
  const std::string data = Pattern(3 << 20, 1);
  const std::string path = h.Put("d.bin", data);
  ReadIsRightOrFails(*h.backend, path, data, 100, 1000);
  ReadIsRightOrFails(*h.backend, path, data, 0, data.size());
}

TEST_CASE("S3 hostile: a short or misplaced range is DATA_LOSS", "[s3]") {
  for (const std::string mode : {"shortbody", "wrongrange"}) {
    CAPTURE(mode);
    Hostile h(mode);
    const std::string data = Pattern(3 << 20, 2);
    const std::string path = h.Put("r.bin", data);
    auto file = h.backend->NewReadableFile(path);
    CKPT_REQUIRE_OK(file);
    std::string got(4096, '\0');
    IoOp op{8192, got.data(), got.size()};
    const absl::Status s = (*file)->ReadBatch({&op, 1});
    CHECK(s.code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(s.message()), Catch::Contains("r.bin"));
  }
}

TEST_CASE("S3 hostile: listings outside the prefix, endless or absurd fail or are ignored",
          "[s3]") {
  {
    Hostile h("badkey");
    h.Put("dir/a", "a");
    auto names = h.backend->ListDir("s3://hostile/dir");
    CKPT_REQUIRE_OK(names);
    CHECK(*names == std::vector<std::string>{"a"});  // "elsewhere" is not under dir/
  }
  {
    Hostile h("looping");
    const absl::Time start = absl::Now();
    auto names = h.backend->ListDir("s3://hostile/dir");
    CHECK(names.status().code() == absl::StatusCode::kDataLoss);
    CHECK(absl::Now() - start < absl::Seconds(30));  // not the hang it tried
  }
  {
    Hostile h("longkey");
    auto names = h.backend->ListDir("s3://hostile/dir");
    CHECK(names.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(names.status().message()), Catch::Contains("1,024"));
  }
}

// Step 7 of job "job" under s3://hostile/root, its data uploaded: what a
// commit finds.
struct Step7 {
  const std::string root = "s3://hostile/root";
  const std::string partial = storage::PartialDir(root, "job", 7, "host-0123456789abcdef-0");
  v1::CheckpointManifest manifest;

  explicit Step7(Hostile& h) {
    h.Put("root/job/.step-7.partial-host-0123456789abcdef-0/data/h-0.bin", "data");
    manifest.set_format_version(1);
    manifest.set_job("job");
    manifest.set_step(7);
  }
  absl::Status Commit(Hostile& h) const {
    return coordinator::CommitCheckpoint(*h.backend, root, partial, manifest);
  }
};

TEST_CASE("S3 hostile: a commit stored with its answer lost is a commit", "[s3]") {
  Hostile h("lostcommit");
  REQUIRE(h.backend->limits().conditional_create);
  const Step7 step(h);
  const std::string& root = step.root;
  const std::string& partial = step.partial;
  CKPT_REQUIRE_OK(step.Commit(h));
  auto dir = storage::ResolveStepDir(*h.backend, root, "job", 7);
  CKPT_REQUIRE_OK(dir);
  CHECK(*dir == partial);
  // And a second commit of the step is refused.
  const absl::Status again = step.Commit(h);
  CHECK(again.code() == absl::StatusCode::kAlreadyExists);
}

TEST_CASE("S3 hostile: a commit that may have landed keeps its files", "[s3]") {
  Hostile h("lostunread");
  const Step7 step(h);
  // The COMMIT lands, its answer is lost, and it cannot be read back: the
  // save fails, marked so that no caller removes the files it may name.
  const absl::Status s = step.Commit(h);
  INFO(s.ToString());
  REQUIRE_FALSE(s.ok());
  CHECK(coordinator::CommitOutcomeUnknown(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("cannot be told"));
}

}  // namespace
}  // namespace ckpt::storage::s3
