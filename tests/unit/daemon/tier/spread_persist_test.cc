// The coordinator's gathering of the durable copy of a step spread over
// hosts (daemon/tier/spread_persist.h), over an in-memory store: one
// directory for every host, one commit once all reported, and a failure
// naming the host (a lost one, one that reported an error or a file not
// its own) that leaves no directory behind.
#include "daemon/tier/spread_persist.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::tier {
namespace {

constexpr char kRoot[] = "/ckpt";

// Step 5 of "job", saved by h0 and h1: one object in each host's file.
v1::CheckpointManifest Manifest() {
  v1::CheckpointManifest m;
  m.set_format_version(1);
  m.set_job("job");
  m.set_step(5);
  m.set_created_unix_ms(1234);
  for (int h = 0; h < 2; ++h) {
    m.mutable_topology()->add_hosts()->set_host(absl::StrCat("h", h));
    v1::ObjectEntry* o = m.add_objects();
    o->set_key("state");
    o->set_rank(h);
    o->mutable_chunk()->set_file(absl::StrCat("data/h", h, "-0.bin"));
    o->mutable_chunk()->set_length(5);
  }
  return m;
}

v1::SpreadPersistOpen OpenBy(const std::string& host) {
  v1::SpreadPersistOpen open;
  open.mutable_host()->set_host(host);
  open.set_manifest(Manifest().SerializeAsString());
  return open;
}

v1::SpreadPersistCopied CopiedBy(const std::string& host, const std::string& id,
                                 std::vector<std::string> files, const std::string& error = "") {
  v1::SpreadPersistCopied copied;
  copied.mutable_host()->set_host(host);
  copied.set_persist_id(id);
  for (const std::string& f : files) copied.add_files(f);
  copied.set_error(error);
  return copied;
}

// A host's part: writes its file into the directory.
void Write(storage::Backend& backend, const v1::SpreadPersistDir& dir, const std::string& file) {
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> out =
      backend.NewWritableFile(absl::StrCat(kRoot, "/", dir.partial_dir(), "/", file));
  CKPT_REQUIRE_OK(out);
  CKPT_REQUIRE_OK((*out)->WriteAt(0, "bytes", 5));
  CKPT_REQUIRE_OK((*out)->Close());
}

std::vector<std::string> JobDir(storage::Backend& backend) {
  absl::StatusOr<std::vector<std::string>> names = backend.ListDir(absl::StrCat(kRoot, "/job"));
  return names.ok() ? *names : std::vector<std::string>{};
}

struct Fixture {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  coordinator::Coordinator durable{*backend, kRoot, planning::SavePlannerOptions{}};
  std::atomic<bool> h1_live{true};
  SpreadPersists persists{
      durable, {.deadline = absl::Seconds(30), .host_live = [this](const std::string& host) {
                  return host != "h1" || h1_live.load();
                }}};
};

TEST_CASE("every host's files in one directory, committed once all reported", "[spread_persist]") {
  Fixture f;
  absl::StatusOr<v1::SpreadPersistDir> d0 = f.persists.Open(OpenBy("h0"));
  absl::StatusOr<v1::SpreadPersistDir> d1 = f.persists.Open(OpenBy("h1"));
  CKPT_REQUIRE_OK(d0);
  CKPT_REQUIRE_OK(d1);
  CHECK(d0->partial_dir() == d1->partial_dir());
  CHECK(d0->persist_id() == d1->persist_id());
  CHECK(absl::StartsWith(d0->partial_dir(), "job/.step-5.partial-"));
  Write(*f.backend, *d0, "data/h0-0.bin");
  Write(*f.backend, *d1, "data/h1-0.bin");
  absl::StatusOr<v1::SpreadPersistResult> r1;
  std::thread h1(
      [&] { r1 = f.persists.Report(CopiedBy("h1", d1->persist_id(), {"data/h1-0.bin"})); });
  absl::StatusOr<v1::SpreadPersistResult> r0 =
      f.persists.Report(CopiedBy("h0", d0->persist_id(), {"data/h0-0.bin"}));
  h1.join();
  CKPT_REQUIRE_OK(r0);
  CKPT_REQUIRE_OK(r1);
  CHECK(r0->path() == "/ckpt/job/step-5");
  CHECK(JobDir(*f.backend) == std::vector<std::string>{"LATEST", "step-5"});
  absl::StatusOr<v1::CheckpointManifest> read = f.durable.catalog().ReadManifest("job", 5);
  CKPT_REQUIRE_OK(read);
  CHECK(read->objects_size() == 2);
  CHECK(f.persists.counts().committed == 1);
  // A host asking again learns it is there.
  CKPT_REQUIRE_ERROR(f.persists.Open(OpenBy("h0")).status(), absl::StatusCode::kAlreadyExists,
                     "is committed");
}

TEST_CASE("a host lost before it reported fails the copy, naming it, and removes the directory",
          "[spread_persist]") {
  Fixture f;
  absl::StatusOr<v1::SpreadPersistDir> d0 = f.persists.Open(OpenBy("h0"));
  CKPT_REQUIRE_OK(d0);
  Write(*f.backend, *d0, "data/h0-0.bin");
  f.h1_live = false;
  absl::StatusOr<v1::SpreadPersistResult> r0 =
      f.persists.Report(CopiedBy("h0", d0->persist_id(), {"data/h0-0.bin"}));
  CKPT_REQUIRE_ERROR(r0.status(), absl::StatusCode::kUnavailable, "host h1 was lost");
  CHECK(JobDir(*f.backend).empty());
  CHECK(f.persists.counts().failed == 1);
}

TEST_CASE("a host's error, or a file not its own, fails the copy naming the host",
          "[spread_persist]") {
  const bool error = GENERATE(true, false);
  Fixture f;
  absl::StatusOr<v1::SpreadPersistDir> d0 = f.persists.Open(OpenBy("h0"));
  CKPT_REQUIRE_OK(d0);
  Write(*f.backend, *d0, "data/h0-0.bin");
  const v1::SpreadPersistCopied copied = error
                                             ? CopiedBy("h1", d0->persist_id(), {}, "disk full")
                                             : CopiedBy("h1", d0->persist_id(), {"data/h0-0.bin"});
  absl::StatusOr<v1::SpreadPersistResult> r1 = f.persists.Report(copied);
  CHECK_FALSE(r1.ok());
  CHECK(absl::StrContains(r1.status().message(), "host h1"));
  CHECK(
      absl::StrContains(r1.status().message(), error ? "disk full" : "not one of its data files"));
  // h0, late, learns the same and nothing is left.
  CHECK(f.persists.Report(CopiedBy("h0", d0->persist_id(), {"data/h0-0.bin"})).status() ==
        r1.status());
  CHECK(JobDir(*f.backend).empty());
}

TEST_CASE("a host not of the step, or another save of it, is refused", "[spread_persist]") {
  Fixture f;
  CKPT_REQUIRE_ERROR(f.persists.Open(OpenBy("h9")).status(), absl::StatusCode::kInvalidArgument,
                     "host h9 is not a host of step 5");
  CKPT_REQUIRE_OK(f.persists.Open(OpenBy("h0")).status());
  v1::CheckpointManifest other = Manifest();
  other.set_created_unix_ms(99);
  v1::SpreadPersistOpen open = OpenBy("h1");
  open.set_manifest(other.SerializeAsString());
  CKPT_REQUIRE_ERROR(f.persists.Open(open).status(), absl::StatusCode::kFailedPrecondition,
                     "another save");
  f.persists.Stop();  // fails the copy in flight, removes its directory
  CHECK(JobDir(*f.backend).empty());
}

}  // namespace
}  // namespace ckpt::tier
