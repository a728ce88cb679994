// Garbage collection end to end, on a real ckptd: `ckptctl gc` (and its dry
// run) deletes exactly what the policy says and what is left loads
// bit-exact; the daemon's retention does the same after each commit; LATEST
// after a rollback, a step a rank is loading and a step another process has
// pinned (as `ckptctl export` does) are never deleted.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/catch.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

// Loads the step with two ranks (another sharding than the save's),
// checking every byte, and returns the step loaded.
void LoadChecked(const TestDaemon& d, const std::string& job, int64_t step, int64_t expected) {
  for (const ExitInfo& r : d.RunRanks(job, "load", 2, step, 1, 1)) {
    INFO(r.output);
    REQUIRE(r.ok());
    CHECK(r.output.find("loaded step " + std::to_string(expected) + ":") != std::string::npos);
  }
}

// The step directories and anything else but LATEST (trash, partials).
std::vector<std::string> Entries(const TestDaemon& d, const std::string& job) {
  std::vector<std::string> out;
  for (const std::string& name : ListDir(d.job_dir(job))) {
    if (name != "LATEST" && name != "OWNER") out.push_back(name);  // step directories and trash
  }
  return out;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A shared lock on the step's MANIFEST, held by this (the test) process:
// what `ckptctl export` takes while it reads a step.
class ForeignPin {
 public:
  explicit ForeignPin(const std::string& manifest)
      : fd_(open(manifest.c_str(), O_RDONLY | O_CLOEXEC)) {
    REQUIRE(fd_ >= 0);
    REQUIRE(flock(fd_, LOCK_SH) == 0);
  }
  ~ForeignPin() { Release(); }
  void Release() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

}  // namespace

TEST_CASE("ckptctl gc keeps the newest N and multiples of K; a dry run deletes nothing", "[gc]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (int64_t step = 1; step <= 6; ++step) SaveStep(d, "gcjob", step);
  const std::vector<std::string> all = Entries(d, "gcjob");
  REQUIRE(all.size() == 6);

  // Just committed: the daemon's default grace period (60 s) keeps them all.
  ExitInfo young = d.Ckptctl({"gc", "gcjob", "--keep-last", "1"});
  INFO(young.output);
  REQUIRE(young.ok());
  CHECK(Contains(young.output, "step 1: kept (committed "));
  CHECK(Contains(young.output, "s ago, within the grace period of 60s)"));
  CHECK(Contains(young.output, "deleted 0 of 6 steps"));
  CHECK(Entries(d, "gcjob") == all);

  ExitInfo dry = d.Ckptctl(
      {"gc", "gcjob", "--keep-last", "2", "--keep-every", "3", "--grace-s", "0", "--dry-run"});
  INFO(dry.output);
  REQUIRE(dry.ok());
  CHECK(Contains(dry.output,
                 "step 1: would delete (older than the newest 2 and not a multiple of 3)"));
  CHECK(Contains(dry.output, "step 3: kept (a multiple of 3)"));
  CHECK(Contains(dry.output, "step 5: kept (one of the newest 2)"));
  CHECK(Contains(dry.output, "step 6: kept (latest)"));
  CHECK(Contains(dry.output, "dry run: would delete 3 of 6 steps"));
  CHECK(Entries(d, "gcjob") == all);

  ExitInfo gc =
      d.Ckptctl({"gc", "gcjob", "--keep-last", "2", "--keep-every", "3", "--grace-s", "0"});
  INFO(gc.output);
  REQUIRE(gc.ok());
  CHECK(Contains(gc.output, "step 4: deleted (older than the newest 2 and not a multiple of 3)"));
  CHECK(Contains(gc.output, "deleted 3 of 6 steps"));
  // The same bytes the dry run announced: "(<n> bytes) to free" / "freed".
  const auto bytes = [](const std::string& text) {
    const size_t end = text.find(" bytes) ");
    const size_t begin = text.rfind('(', end);
    return text.substr(begin + 1, end - begin - 1);
  };
  CHECK(bytes(gc.output) == bytes(dry.output));
  CHECK(std::stoll(bytes(gc.output)) > 3 * 1'000'000);  // three ~1.4 MiB steps
  CHECK(Entries(d, "gcjob") == std::vector<std::string>{"step-3", "step-5", "step-6"});
  CHECK(Contains(d.Output(), "gc of job gcjob (ckptctl gc): deleted steps [1, 2, 4]"));
  LoadChecked(d, "gcjob", -1, 6);
  LoadChecked(d, "gcjob", 3, 3);

  // Bad requests: exit 2 for the command line, 1 with the daemon's reason.
  CHECK(d.Ckptctl({"gc", "gcjob", "--keep-last", "0"}).exit_code == 2);
  CHECK(d.Ckptctl({"gc", "gcjob"}).exit_code == 2);
  ExitInfo unknown = d.Ckptctl({"gc", "nojob", "--keep-last", "1"});
  CHECK(unknown.exit_code == 1);
  CHECK(Contains(unknown.output, "NOT_FOUND: job nojob has no checkpoints under"));
  ExitInfo bad_name = d.Ckptctl({"gc", "../etc", "--keep-last", "1"});
  CHECK(bad_name.exit_code == 1);
  CHECK(Contains(bad_name.output, "INVALID_ARGUMENT"));
}

TEST_CASE("retention after each commit keeps exactly what the policy says", "[gc][retention]") {
  TestDaemon d;
  REQUIRE(d.Start({"--retain_last=2", "--retain_every=4", "--retain_grace_s=0",
                   "--retention=keepall:last=0"})
              .ok());
  for (int64_t step = 1; step <= 6; ++step) SaveStep(d, "auto", step);
  for (int64_t step = 1; step <= 3; ++step) SaveStep(d, "keepall", step);
  // Runs are in the background, after each commit; only the run after
  // step 6's commit keeps [4, 5, 6].
  REQUIRE(d.WaitForOutput("gc of job auto (retention): deleted steps ["));
  REQUIRE(d.WaitForOutput("; kept [4, 5, 6]"));
  CHECK(Entries(d, "auto") == std::vector<std::string>{"step-4", "step-5", "step-6"});
  CHECK(Entries(d, "keepall") == std::vector<std::string>{"step-1", "step-2", "step-3"});
  CHECK_FALSE(Contains(d.Output(), "gc of job keepall"));
  LoadChecked(d, "auto", -1, 6);
  LoadChecked(d, "auto", 4, 4);

  // A bad policy is refused at start-up, naming the flag.
  TestDaemon bad;
  absl::Status refused = bad.Start({"--retention=auto:last=two"});
  CHECK_FALSE(refused.ok());
  CHECK(Contains(std::string(refused.message()), "--retention entry \"auto:last=two\""));
}

TEST_CASE("gc never deletes LATEST after a rollback, a step being loaded or a pinned one",
          "[gc][pin]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (int64_t step : {10, 20, 30, 40}) SaveStep(d, "pinned", step);
  SaveStep(d, "pinned", 15);  // a rollback: latest is 15, not the highest step

  auto stub = d.Stub();
  auto loading = std::make_unique<RawRank>(*stub, "pinned");
  // Planned and never drained: the load of step 20 is in flight.
  const grpc::Status planned = LoadRaw(*stub, loading->session(), 20, {}, {"dataloader"});
  INFO(planned.error_message());
  REQUIRE(planned.ok());
  ForeignPin exporting(d.job_dir("pinned") + "/step-30/MANIFEST");

  ExitInfo gc = d.Ckptctl({"gc", "pinned", "--keep-last", "1", "--grace-s", "0"});
  INFO(gc.output);
  REQUIRE(gc.ok());
  CHECK(Contains(gc.output, "step 10: deleted"));
  CHECK(Contains(gc.output, "step 15: kept (latest)"));
  CHECK(Contains(gc.output, "step 20: kept (in use: a load or an export holds its pin)"));
  CHECK(Contains(gc.output, "step 30: kept (in use: a load or an export holds its pin)"));
  CHECK(Contains(gc.output, "step 40: kept (one of the newest 1)"));
  CHECK(Entries(d, "pinned") ==
        std::vector<std::string>{"step-15", "step-20", "step-30", "step-40"});

  // The load ends (its rank detaches) and the export lets go: both may go.
  loading.reset();
  exporting.Release();
  gc = d.Ckptctl({"gc", "pinned", "--keep-last", "1", "--grace-s", "0"});
  INFO(gc.output);
  REQUIRE(gc.ok());
  CHECK(Contains(gc.output, "deleted 2 of 4 steps"));
  CHECK(Entries(d, "pinned") == std::vector<std::string>{"step-15", "step-40"});
  LoadChecked(d, "pinned", -1, 15);
  LoadChecked(d, "pinned", 40, 40);
}

}  // namespace ckpt::testing
