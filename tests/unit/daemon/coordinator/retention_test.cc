// Retention: the pure policy (every rule, and which reason wins), the
// parsing of ckptd's --retention flag, and the garbage collector on real
// commits in the memory backend: LATEST after a rollback, pinned steps,
// broken steps, dry runs, and no trash left behind.
#include <stdlib.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/commit.h"
#include "daemon/coordinator/retention.h"
#include "daemon/planning/retention_policy.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "proto/lib/crc32c.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

using storage::Backend;

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

planning::StepFacts Old(int64_t step) {
  planning::StepFacts f;
  f.step = step;
  f.committed = kNow - absl::Hours(1);
  return f;
}

// step -> (keep, reason) of each decision.
std::map<int64_t, std::pair<bool, std::string>> Decide(
    const planning::RetentionPolicy& policy, const std::vector<planning::StepFacts>& steps) {
  std::map<int64_t, std::pair<bool, std::string>> out;
  for (const planning::StepDecision& d : planning::DecideRetention(policy, steps, kNow)) {
    out[d.step] = {d.keep, d.reason};
  }
  return out;
}

std::vector<int64_t> Kept(const std::map<int64_t, std::pair<bool, std::string>>& d) {
  std::vector<int64_t> kept;
  for (const auto& [step, decision] : d) {
    if (decision.first) kept.push_back(step);
  }
  return kept;
}

TEST_CASE("policy: the newest N, multiples of K and latest are kept", "[retention]") {
  std::vector<planning::StepFacts> steps;
  for (int64_t s : {10, 20, 30, 40, 50, 60, 70}) steps.push_back(Old(s));
  steps[1].latest = true;  // a rollback made step 20 latest
  planning::RetentionPolicy policy;
  policy.keep_last = 2;
  auto d = Decide(policy, steps);
  CHECK(Kept(d) == std::vector<int64_t>{20, 60, 70});
  CHECK(d[20].second == "latest");
  CHECK(d[70].second == "one of the newest 2");
  CHECK(d[10].second == "older than the newest 2");

  policy.keep_every = 30;
  d = Decide(policy, steps);
  CHECK(Kept(d) == std::vector<int64_t>{20, 30, 60, 70});
  CHECK(d[30].second == "a multiple of 30");
  CHECK(d[40].second == "older than the newest 2 and not a multiple of 30");

  policy.keep_last = 0;  // retention off
  CHECK(Kept(Decide(policy, steps)).size() == steps.size());
}

TEST_CASE("policy: steps in use, young steps and steps of unknown age are kept", "[retention]") {
  std::vector<planning::StepFacts> steps = {Old(1), Old(2), Old(3), Old(4), Old(5)};
  steps.back().latest = true;
  steps[0].in_use = "in use: a load or an export holds its pin";
  steps[1].committed = kNow - absl::Seconds(10);
  steps[2].committed.reset();
  planning::RetentionPolicy policy;
  policy.keep_last = 1;
  policy.grace = absl::Seconds(60);
  auto d = Decide(policy, steps);
  CHECK(Kept(d) == std::vector<int64_t>{1, 2, 3, 5});
  CHECK(d[1].second == "in use: a load or an export holds its pin");
  CHECK(d[2].second == "committed 10s ago, within the grace period of 60s");
  CHECK(d[3].second == "its commit time is unknown");
  CHECK_FALSE(d[4].first);
  // A clock that went backwards makes a step young, not negative-aged.
  steps[3].committed = kNow + absl::Hours(1);
  CHECK(Decide(policy, steps)[4].first);
}

TEST_CASE("policy: broken steps do not count and go only when asked", "[retention]") {
  std::vector<planning::StepFacts> steps = {Old(1), Old(2), Old(3), Old(4)};
  steps[3].broken = true;  // the newest is broken, and not latest
  steps[3].broken_reason = "MANIFEST: bad checksum";
  steps[2].latest = true;
  planning::RetentionPolicy policy;
  policy.keep_last = 2;
  auto d = Decide(policy, steps);
  // Two valid steps kept (2, 3), not one plus the broken one.
  CHECK(Kept(d) == std::vector<int64_t>{2, 3, 4});
  CHECK_THAT(d[4].second, Catch::Contains("broken (MANIFEST: bad checksum)") &&
                              Catch::Contains("--delete-broken"));
  policy.delete_broken = true;
  d = Decide(policy, steps);
  CHECK(Kept(d) == std::vector<int64_t>{2, 3});
  CHECK(d[4].second == "broken (MANIFEST: bad checksum)");
  // Even asked to, a broken step that is latest stays.
  steps[3].latest = true;
  steps[2].latest = false;
  CHECK(Decide(policy, steps)[4].first);
}

TEST_CASE("policy: the base of a kept delta step is kept, a deleted one's is not", "[retention]") {
  // 1 and 4 are full; 2, 3 deltas of 1; 5, 6 deltas of 4.
  std::vector<planning::StepFacts> steps = {Old(1), Old(2), Old(3), Old(4), Old(5), Old(6)};
  for (int i : {1, 2}) steps[i].delta_base = 1;
  for (int i : {4, 5}) steps[i].delta_base = 4;
  planning::RetentionPolicy policy;
  policy.keep_last = 1;
  auto d = Decide(policy, steps);
  CHECK(Kept(d) == std::vector<int64_t>{4, 6});
  CHECK(d[4].second == "the base of step 6");
  // Step 3 kept as a milestone keeps its base; step 2 is not kept for it.
  policy.keep_every = 3;
  d = Decide(policy, steps);
  CHECK(Kept(d) == std::vector<int64_t>{1, 3, 4, 6});
  CHECK(d[1].second == "the base of step 3");
}

TEST_CASE("--retention overrides parse per job and refuse nonsense", "[retention]") {
  absl::StatusOr<planning::RetentionConfig> c =
      planning::ParseRetentionConfig(5, 0, 30, "jobA:last=3:every=100,jobB:last=10:grace_s=0");
  CKPT_REQUIRE_OK(c);
  CHECK(c->For("other").keep_last == 5);
  CHECK(c->For("jobA").keep_last == 3);
  CHECK(c->For("jobA").keep_every == 100);
  CHECK(c->For("jobA").grace == absl::Seconds(30));  // not given: the flag's
  CHECK(c->For("jobB").grace == absl::ZeroDuration());
  CHECK(planning::ParseRetentionConfig(0, 0, 60, "").ok());

  const std::pair<std::string, std::string> bad[] = {
      {"jobA", "want JOB:last=N"},
      {"jobA:last=x", "is not KEY=INTEGER"},
      {"jobA:keep=3", "unknown key \"keep\""},
      {"jobA:last=-1", "last must be >= 0"},
      {"jobA:last=1,jobA:last=2", "job jobA is named twice"},
      {"jobA:last=1:last=2", "last is given twice"},
      {"../x:last=1", "job"},
      {"jobA:grace_s=-5", "grace_s must be between 0"},
  };
  for (const auto& [flag, message] : bad) {
    CAPTURE(flag);
    CKPT_REQUIRE_ERROR(planning::ParseRetentionConfig(0, 0, 60, flag),
                       absl::StatusCode::kInvalidArgument, "--retention entry", message);
  }
  CKPT_REQUIRE_ERROR(planning::ParseRetentionConfig(-1, 0, 60, ""),
                     absl::StatusCode::kInvalidArgument, "--retain_last");
  CKPT_REQUIRE_ERROR(planning::ParseRetentionConfig(1, -2, 60, ""),
                     absl::StatusCode::kInvalidArgument, "--retain_every");
  CKPT_REQUIRE_ERROR(planning::ParseRetentionConfig(1, 0, -1, ""),
                     absl::StatusCode::kInvalidArgument, "--retain_grace_s");
}

// --- The collector, on real commits in memory -------------------------------

constexpr char kJob[] = "job";

void Write(storage::Backend& backend, const std::string& path, const std::string& contents) {
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteAt(0, contents.data(), contents.size()));
  CKPT_REQUIRE_OK((*file)->Sync());
  CKPT_REQUIRE_OK((*file)->Close());
}

// One tensor of 10 bytes, committed through the real protocol; created in
// 1970, so older than any grace period.
void CommitStep(storage::Backend& backend, const std::string& root, int64_t step) {
  const std::string data = "0123456789";
  const std::string partial =
      storage::PartialDir(root, kJob, step, absl::StrCat("h0-00000000000000aa-", step));
  CKPT_REQUIRE_OK(backend.CreateDirs(partial + "/data"));
  Write(backend, partial + "/data/h0-0.bin", data);
  const v1::CheckpointManifest m = planning::testing::ManifestOf(kJob, step, data, data.size());
  CKPT_REQUIRE_OK(CommitCheckpoint(backend, root, partial, m));
}

std::vector<std::string> Entries(storage::Backend& backend, const std::string& root) {
  absl::StatusOr<std::vector<std::string>> names = backend.ListDir(storage::JobDir(root, kJob));
  CKPT_REQUIRE_OK(names);
  return *names;
}

std::map<int64_t, GcStep> ByStep(const GcResult& result) {
  std::map<int64_t, GcStep> out;
  for (const GcStep& s : result.steps) out[s.step] = s;
  return out;
}

// A collector over the memory backend (no modification times: a step's
// age is its manifest's), or POSIX in a temporary directory.
struct Fixture {
  explicit Fixture(bool posix = false) {
    if (posix) {
      char dir[] = "/tmp/retention_test.XXXXXX";
      REQUIRE(mkdtemp(dir) != nullptr);
      root = dir;
      backend = storage::NewPosixBackend();
    } else {
      root = "/root";
      backend = storage::NewMemoryBackend();
    }
    catalog = std::make_unique<Catalog>(
        *backend, root, CatalogOptions{.host = "h0", .instance = "00000000000000bb", .limits = {}});
    gc = std::make_unique<GarbageCollector>(*backend, *catalog);
  }
  ~Fixture() {
    if (root != "/root") (void)backend->RemoveAll(root);
  }
  void Commit(int64_t step) { CommitStep(*backend, root, step); }
  std::vector<int64_t> Steps() { return catalog->ListSteps(kJob).value(); }

  std::string root;
  std::unique_ptr<storage::Backend> backend;
  std::unique_ptr<Catalog> catalog;
  std::unique_ptr<GarbageCollector> gc;
};

TEST_CASE("gc deletes what the policy says, keeps LATEST after a rollback and pinned steps",
          "[retention][gc]") {
  Fixture f;
  for (int64_t s : {1, 2, 4, 5, 6}) f.Commit(s);
  f.Commit(3);  // rollback: 3 is latest
  absl::StatusOr<std::unique_ptr<storage::FileLock>> pin = PinStep(*f.backend, f.root, kJob, 1);
  CKPT_REQUIRE_OK(pin);
  planning::RetentionPolicy policy;
  policy.keep_last = 2;

  // A dry run reports and deletes nothing.
  absl::StatusOr<GcResult> dry = f.gc->Collect(kJob, policy, true, absl::Now(), "test");
  CKPT_REQUIRE_OK(dry);
  auto steps = ByStep(*dry);
  CHECK(steps[1].outcome == GcStep::Outcome::kKept);
  CHECK(steps[1].reason == "in use: a load or an export holds its pin");
  CHECK(steps[2].outcome == GcStep::Outcome::kDeleted);
  CHECK(steps[2].bytes > 10);  // data and MANIFEST
  CHECK(steps[3].reason == "latest");
  CHECK(steps[4].outcome == GcStep::Outcome::kDeleted);
  CHECK(dry->bytes_freed == steps[2].bytes + steps[4].bytes);
  CHECK(f.Steps() == std::vector<int64_t>{1, 2, 3, 4, 5, 6});

  absl::StatusOr<GcResult> done = f.gc->Collect(kJob, policy, false, absl::Now(), "test");
  CKPT_REQUIRE_OK(done);
  CHECK_FALSE(done->failed());
  CHECK(done->bytes_freed == dry->bytes_freed);
  CHECK(f.Steps() == std::vector<int64_t>{1, 3, 5, 6});
  CHECK(f.catalog->ResolveStep(kJob, -1).value() == 3);
  for (const std::string& name : Entries(*f.backend, f.root))
    CHECK(name.find("trash") == std::string::npos);

  // Unpinned, step 1 goes too.
  pin->reset();
  done = f.gc->Collect(kJob, policy, false, absl::Now(), "test");
  CKPT_REQUIRE_OK(done);
  CHECK(f.Steps() == std::vector<int64_t>{3, 5, 6});
  // A reader that resolved step 1 before gc finds it gone, not half there.
  CHECK(PinStep(*f.backend, f.root, kJob, 1).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("gc keeps a broken step unless asked, and refuses an unknown job", "[retention][gc]") {
  // POSIX: a broken step's age is its directory's modification time.
  Fixture f(/*posix=*/true);
  for (int64_t s : {1, 2, 3}) f.Commit(s);
  CKPT_REQUIRE_OK(f.backend->RemoveAll(storage::StepDir(f.root, kJob, 1) + "/data"));
  planning::RetentionPolicy policy;
  policy.keep_last = 1;
  policy.grace = absl::ZeroDuration();
  absl::StatusOr<GcResult> r = f.gc->Collect(kJob, policy, false, absl::Now(), "test");
  CKPT_REQUIRE_OK(r);
  CHECK_THAT(ByStep(*r)[1].reason,
             Catch::Contains("broken (") && Catch::Contains("--delete-broken"));
  CHECK(f.Steps() == std::vector<int64_t>{1, 3});
  policy.delete_broken = true;
  r = f.gc->Collect(kJob, policy, false, absl::Now(), "test");
  CKPT_REQUIRE_OK(r);
  CHECK(ByStep(*r)[1].outcome == GcStep::Outcome::kDeleted);
  CHECK(f.Steps() == std::vector<int64_t>{3});
  // Without a time for it (memory), a broken step is too young to tell.
  Fixture m;
  for (int64_t s : {1, 2}) m.Commit(s);
  CKPT_REQUIRE_OK(m.backend->RemoveAll(storage::StepDir(m.root, kJob, 1) + "/data"));
  r = m.gc->Collect(kJob, policy, false, absl::Now(), "test");
  CKPT_REQUIRE_OK(r);
  CHECK(ByStep(*r)[1].reason == "its commit time is unknown");

  CKPT_REQUIRE_ERROR(f.gc->Collect("nojob", policy, false, absl::Now(), "test"),
                     absl::StatusCode::kNotFound, "job nojob has no checkpoints under /tmp/");
  CKPT_REQUIRE_ERROR(f.gc->Collect("../x", policy, false, absl::Now(), "test"),
                     absl::StatusCode::kInvalidArgument, "job");
}

TEST_CASE("start-up and the next gc finish a delete a crash interrupted", "[retention][gc]") {
  Fixture f;
  for (int64_t s : {1, 2}) f.Commit(s);
  // What a gc killed after its rename leaves: step 1 as this host's trash,
  // from an earlier instance; another host's trash must stay.
  const std::string mine = storage::TrashDir(f.root, kJob, 1, "h0-00000000000000aa-7");
  const std::string theirs = storage::TrashDir(f.root, kJob, 9, "h1-00000000000000cc-1");
  CKPT_REQUIRE_OK(f.backend->Rename(storage::StepDir(f.root, kJob, 1), mine));
  CKPT_REQUIRE_OK(f.backend->CreateDirs(theirs + "/data"));
  CHECK(f.Steps() == std::vector<int64_t>{2});
  CKPT_REQUIRE_OK(f.catalog->RemoveStalePartials());
  CHECK(Entries(*f.backend, f.root) ==
        std::vector<std::string>{".step-9.trash-h1-00000000000000cc-1", "LATEST", "step-2"});
}

}  // namespace
}  // namespace ckpt::coordinator
