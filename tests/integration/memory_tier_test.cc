// The memory tier (daemon/tier/memory_tier.h) on a real ckptd with real
// rank processes: a trainer killed with SIGKILL restarts from the daemon's
// memory without reading storage; a byte flipped in memory is caught and
// read from storage instead; the every-step policy keeps the budget and
// makes complete durable checkpoints from the memory copy.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

// The demo model at scale 1 is ~1.4 MiB; 8 MiB holds a few steps of it.
constexpr uint64_t kBudget = uint64_t{8} << 20;

std::string BudgetFlag(uint64_t bytes = kBudget) {
  return absl::StrCat("--memory_tier_bytes=", bytes);
}

void RequireAllOk(const std::vector<ExitInfo>& ranks) {
  for (const ExitInfo& r : ranks) {
    INFO(r.output);
    REQUIRE(r.ok());
  }
}

// The steps of `ckptctl list`'s table whose TIERS column is `tiers`.
std::vector<std::string> StepsIn(const std::string& table, const std::string& tiers) {
  std::vector<std::string> steps;
  size_t at = table.find('\n');
  while (at != std::string::npos && at + 1 < table.size()) {
    const size_t end = table.find('\n', at + 1);
    const std::string line = table.substr(at + 1, end - at - 1);
    at = end;
    if (line.find("  " + tiers + " ") == std::string::npos && !absl::EndsWith(line, "  " + tiers)) {
      continue;
    }
    const size_t first = line.find_first_not_of(' ');
    steps.push_back(line.substr(first, line.find(' ', first) - first));
  }
  return steps;
}

// Changes a byte of step `step`'s first tensor chunk where ckptd holds it
// in memory, writing through /proc/<pid>/fd as root (or anything with the
// rights) could. The memory file is told apart from the others by holding
// that chunk's bytes as the durable copy has them. True once written.
bool WriteByteInMemoryTier(const TestDaemon& d, const std::string& job, int64_t step) {
  const v1::CheckpointManifest manifest = InspectManifest(d, job, step);
  const v1::StoredChunk* chunk = nullptr;
  for (const v1::TensorEntry& t : manifest.tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) {
        if (chunk == nullptr && c.length() >= 64) chunk = &c;
      }
    }
  }
  if (chunk == nullptr) return false;
  std::ifstream durable(absl::StrCat(d.job_dir(job), "/step-", step, "/", chunk->file()),
                        std::ios::binary);
  std::string want(chunk->length(), '\0');
  durable.seekg(static_cast<std::streamoff>(chunk->file_offset()));
  if (!durable.read(want.data(), static_cast<std::streamsize>(want.size()))) return false;
  const off_t at = static_cast<off_t>(chunk->file_offset());
  for (const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", d.pid(), "/fd"))) {
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(entry.path(), ec);
    if (ec || target.string().find("ckpt-memory-tier") == std::string::npos) continue;
    const int fd = open(entry.path().c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    std::string have(want.size(), '\0');
    bool written = pread(fd, have.data(), have.size(), at) == static_cast<ssize_t>(have.size()) &&
                   have == want;
    if (written) {
      const char flipped = static_cast<char>(have[have.size() / 2] ^ 0x01);
      written = pwrite(fd, &flipped, 1, at + static_cast<off_t>(have.size() / 2)) == 1;
    }
    close(fd);
    if (written) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a restarted trainer loads what ckptd verified as it attached; a changed file again",
          "[memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag()}).ok());
  RequireAllOk(d.RunRanks("early", "save", 2, 5, 1, 0, {"--tier=both"}));
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_persists() == 1; }));
  // The restarted trainer's ranks attach, and ckptd checks step 5 then
  // (early_step_check.h); the load takes that check and verifies nothing
  // again.
  for (const ExitInfo& r : d.RunRanks("early", "load", 2, -1, 1, 2)) {
    INFO(r.output);
    CHECK(r.ok());  // every byte compared against the pattern the save wrote
    CHECK(absl::StrContains(r.output, "tiers=memory fallback_chunks=0"));
  }
  CHECK(absl::StrContains(d.Output(), "memory-check job=early step=5 verified="));
  const v1::GetStatusResponse first = d.Status();
  CHECK(first.memory_checks_early() == 1);
  CHECK(first.chunk_bytes_read() == 0);
  CHECK(first.memory_bytes_in_place() > 0);
  CHECK(first.memory_bytes_checked_early() == first.memory_bytes_in_place());

  // A byte changes after the check, written as no ckptd code path would
  // (opening ckptd's owner-read-only memory files for writing takes root).
  if (geteuid() != 0) {
    WARN("not root: the write after the check is not tried");
    return;
  }
  REQUIRE(WriteByteInMemoryTier(d, "early", 5));
  // The next load takes the same check, finds that file changed since,
  // verifies it where it lies, and reads the bad chunk's group from storage.
  for (const ExitInfo& r : d.RunRanks("early", "load", 2, -1, 1, 2)) {
    INFO(r.output);
    CHECK(r.ok());  // bit-exact despite the changed byte
    CHECK(absl::StrContains(r.output, "tiers=memory+durable fallback_chunks=1"));
  }
  const v1::GetStatusResponse second = d.Status();
  CHECK(second.memory_checks_early() == 2);
  CHECK(second.load_fallback_chunks() == first.load_fallback_chunks() + 1);
  CHECK(absl::StrContains(d.Output(), "fails its CRC32C in place"));
  // The changed file was read again; any other not.
  CHECK(second.memory_bytes_checked_early() - first.memory_bytes_checked_early() <
        first.memory_bytes_checked_early());
}

TEST_CASE("a trainer killed after saving to memory restarts from memory, reading no storage",
          "[memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag()}).ok());
  // Four ranks save steps 1 and 2 to memory and go on "training"...
  RequireAllOk(d.RunRanks("crash", "save", 4, 1, 1, 0, {"--tier=memory"}));
  std::vector<std::unique_ptr<Subprocess>> trainer;
  for (int r = 0; r < 4; ++r) {
    trainer.push_back(d.StartRank("crash", "save", r, 4, 2, 0, 1, {"--tier=memory", "--linger"}));
  }
  for (auto& rank : trainer) REQUIRE(rank->WaitForOutput("saved step 2", absl::Seconds(30)));
  // ...until every one of them is SIGKILLed.
  for (auto& rank : trainer) {
    rank->Signal(SIGKILL);
    CHECK(rank->Wait().signal == SIGKILL);
  }
  const v1::GetStatusResponse before = d.Status();
  CHECK(before.storage_bytes_written() == 0);  // memory only: storage was never touched
  REQUIRE(before.memory_tier_jobs_size() == 1);
  CHECK(before.memory_tier_jobs(0).steps(before.memory_tier_jobs(0).steps_size() - 1) == 2);
  const ExitInfo list = d.Ckptctl({"list", "crash"});
  INFO(list.output);
  CHECK(StepsIn(list.output, "memory") == std::vector<std::string>{"2"});
  // Operators inspect and verify a step in memory as one on disk.
  const ExitInfo verify = d.Ckptctl({"verify", "crash", "latest"});
  INFO(verify.output);
  CHECK(verify.ok());
  CHECK(InspectManifest(d, "crash", -1).step() == 2);

  // The restarted trainer has two ranks (another sharding) and loads latest.
  for (const ExitInfo& r : d.RunRanks("crash", "load", 2, -1, 1, 4)) {
    INFO(r.output);
    CHECK(r.ok());  // every byte compared against the pattern the save wrote
    CHECK(absl::StrContains(r.output, "loaded step 2"));
    CHECK(absl::StrContains(r.output, "tiers=memory fallback_chunks=0"));
  }
  const v1::GetStatusResponse after = d.Status();
  CHECK(after.storage_bytes_read() == 0);
  CHECK(after.chunk_bytes_read() == 0);
  CHECK(after.memory_bytes_read() > 0);
  // Copied by the ranks from where the bytes lie in the tier, none through
  // the pool.
  CHECK(after.memory_bytes_in_place() == after.memory_bytes_read());
  CHECK(absl::StrContains(d.Output(), "tier=memory"));
}

TEST_CASE("a byte flipped in memory is read from storage instead, and counted", "[memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(), "--fault_corrupt_at=memory.after_persist"}).ok());
  RequireAllOk(d.RunRanks("flip", "save", 2, 5, 1, 0, {"--tier=both"}));
  // The persisted copy was taken before the flip: storage has good bytes.
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_persists() == 1; }));
  REQUIRE(d.WaitForOutput("corruption point memory.after_persist reached"));
  // Verify checks every tier's copy: the memory one is now bad.
  const ExitInfo verify = d.Ckptctl({"verify", "flip", "5"});
  INFO(verify.output);
  CHECK_FALSE(verify.ok());
  CHECK(absl::StrContains(verify.output, "the memory copy"));
  const ExitInfo list = d.Ckptctl({"list", "flip"});
  INFO(list.output);
  CHECK(StepsIn(list.output, "durable+memory") == std::vector<std::string>{"5"});

  // The ranks that copy the bad chunk's bytes say they came from storage
  // (ckpt-demo-rank checks each rank's sources add up to its bytes).
  bool from_storage = false;
  for (const ExitInfo& r : d.RunRanks("flip", "load", 3, -1, 1, 2)) {
    INFO(r.output);
    CHECK(r.ok());  // bit-exact despite the flipped byte
    CHECK(absl::StrContains(r.output, "loaded step 5"));
    CHECK(absl::StrContains(r.output, "tiers=memory+durable fallback_chunks=1"));
    CHECK(absl::StrContains(r.output, "load sources=memory@"));
    from_storage = from_storage || absl::StrContains(r.output, "storage@");
  }
  CHECK(from_storage);
  CHECK(absl::StrContains(d.Output(), ",storage@"));  // the load's log line
  const v1::GetStatusResponse status = d.Status();
  CHECK(status.load_fallback_chunks() == 1);  // read once, shared by the ranks
  CHECK(status.storage_bytes_read() > 0);
  CHECK(absl::StrContains(d.Output(), "load-fallback job=flip step=5 from=memory to=durable"));
  CHECK(absl::StrContains(d.Output(), "fallback_chunks=1"));
  // Caught where it lies, before any rank could copy it.
  CHECK(absl::StrContains(d.Output(), "fails its CRC32C in place"));
}

TEST_CASE("a byte flipped in memory with no durable copy fails the load, naming the chunk",
          "[memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(), "--fault_corrupt_at=memory.after_commit"}).ok());
  RequireAllOk(d.RunRanks("flip", "save", 1, 1, 1, 0, {"--tier=memory"}));
  for (const ExitInfo& r : d.RunRanks("flip", "load", 1, -1, 1, 1)) {
    INFO(r.output);
    CHECK_FALSE(r.ok());
    CHECK(absl::StrContains(r.output, "DATA_LOSS"));
    CHECK(absl::StrContains(r.output, "storage has no step 1"));
  }
  const ExitInfo verify = d.Ckptctl({"verify", "flip", "1"});
  INFO(verify.output);
  CHECK_FALSE(verify.ok());
  CHECK(absl::StrContains(verify.output, "the memory copy"));
  // A memory copy that went bad is never made durable either.
  RequireAllOk(d.RunRanks("flip", "save", 1, 2, 1, 0, {"--tier=both"}));
  REQUIRE(AwaitStatus(
      d, [](const v1::GetStatusResponse& s) { return s.memory_persist_failures() == 1; }));
  CHECK(absl::StrContains(d.Output(), "fails its CRC32C in the memory tier"));
  const std::vector<std::string> entries = ListDir(d.job_dir("flip"));
  CHECK(std::find(entries.begin(), entries.end(), "step-2") == entries.end());
  CHECK(d.Running());
}

TEST_CASE("every step to memory, every fifth to storage: budget kept, durable steps complete",
          "[memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag()}).ok());
  for (int step = 1; step <= 20; ++step) {
    const std::string tier = step % 5 == 0 ? "--tier=both" : "--tier=memory";
    RequireAllOk(d.RunRanks("policy", "save", 2, step, 1, 0, {tier}));
    const v1::GetStatusResponse status = d.Status();
    CHECK(status.memory_tier_bytes() <= kBudget);
    CHECK(status.memory_tier_budget_bytes() == kBudget);
  }
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_persists() == 4; }));
  CHECK(d.Status().memory_persist_failures() == 0);
  CHECK(ListedSteps(d, "policy") == std::vector<int64_t>{5, 10, 15, 20});
  for (const std::string step : {"5", "10", "15", "20"}) {
    const ExitInfo verify = d.Ckptctl({"verify", "policy", step});
    INFO(verify.output);
    CHECK(verify.ok());
  }
  // A durable step loads bit-exact from storage alone.
  for (const ExitInfo& r : d.RunRanks("policy", "load", 2, 15, 1, 2, {"--from=durable"})) {
    INFO(r.output);
    CHECK(r.ok());
    CHECK(absl::StrContains(r.output, "tiers=durable"));
  }
  // Memory keeps the newest step (--memory_tier_keep_steps=1).
  const v1::GetStatusResponse status = d.Status();
  REQUIRE(status.memory_tier_jobs_size() == 1);
  CHECK(status.memory_tier_jobs(0).steps(status.memory_tier_jobs(0).steps_size() - 1) == 20);
  CHECK(status.memory_tier_bytes() <= kBudget);
}

TEST_CASE("a memory-tier save that cannot fit is refused by name; the daemon serves on",
          "[memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(uint64_t{1} << 20)}).ok());
  for (const ExitInfo& r : d.RunRanks("big", "save", 1, 1, 1, 0, {"--tier=memory"})) {
    INFO(r.output);
    CHECK_FALSE(r.ok());
    CHECK(absl::StrContains(r.output, "RESOURCE_EXHAUSTED"));
    CHECK(absl::StrContains(r.output, "--memory_tier_bytes"));
  }
  CHECK(d.Status().memory_tier_bytes() == 0);
  RequireAllOk(d.RunRanks("big", "save", 1, 1, 1));  // to storage: fine

  TestDaemon plain;
  REQUIRE(plain.Start().ok());
  for (const ExitInfo& r : plain.RunRanks("j", "save", 1, 1, 1, 0, {"--tier=memory"})) {
    INFO(r.output);
    CHECK_FALSE(r.ok());
    CHECK(absl::StrContains(r.output, "has none: start it with --memory_tier_bytes"));
  }
  for (const ExitInfo& r : plain.RunRanks("j", "load", 1, -1, 1, 1, {"--from=memory"})) {
    INFO(r.output);
    CHECK_FALSE(r.ok());
    CHECK(absl::StrContains(r.output, "--memory_tier_bytes"));
  }
}

TEST_CASE("latest is the newest step in any tier", "[memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag()}).ok());
  RequireAllOk(d.RunRanks("mix", "save", 1, 3, 1, 0, {"--tier=memory"}));
  RequireAllOk(d.RunRanks("mix", "save", 1, 4, 1));  // durable, newer
  for (const ExitInfo& r : d.RunRanks("mix", "load", 1, -1, 1, 1)) {
    INFO(r.output);
    CHECK(absl::StrContains(r.output, "loaded step 4"));
    CHECK(absl::StrContains(r.output, "tiers=durable"));
  }
  RequireAllOk(d.RunRanks("mix", "save", 1, 5, 1, 0, {"--tier=memory"}));
  for (const ExitInfo& r : d.RunRanks("mix", "load", 1, -1, 1, 1)) {
    INFO(r.output);
    CHECK(absl::StrContains(r.output, "loaded step 5"));
    CHECK(absl::StrContains(r.output, "tiers=memory"));
  }
  // A step only on storage still loads by number.
  for (const ExitInfo& r : d.RunRanks("mix", "load", 1, 4, 1, 1)) {
    INFO(r.output);
    CHECK(r.ok());
    CHECK(absl::StrContains(r.output, "tiers=durable"));
  }
  const ExitInfo list = d.Ckptctl({"list", "mix"});
  INFO(list.output);
  CHECK(StepsIn(list.output, "durable") == std::vector<std::string>{"4"});
  CHECK(absl::StrContains(list.output, "memory          latest"));
}

TEST_CASE("a rollback is latest for list and load alike in either tier", "[memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag()}).ok());
  RequireAllOk(d.RunRanks("back", "save", 1, 10, 1));  // durable
  // The trainer went back to step 4 and saved step 5 to memory: latest,
  // though storage holds a higher step.
  RequireAllOk(d.RunRanks("back", "save", 1, 5, 1, 0, {"--tier=memory"}));
  ExitInfo list = d.Ckptctl({"list", "back"});
  INFO(list.output);
  CHECK(StepsIn(list.output, "memory          latest") == std::vector<std::string>{"5"});
  for (const ExitInfo& r : d.RunRanks("back", "load", 1, -1, 1, 1)) {
    INFO(r.output);
    CHECK(absl::StrContains(r.output, "loaded step 5"));
    CHECK(absl::StrContains(r.output, "tiers=memory"));
  }
  const ExitInfo inspect = d.Ckptctl({"inspect", "back", "latest"});
  INFO(inspect.output);
  CHECK(absl::StrContains(inspect.output, "\"step\": \"5\""));
  // Back again, to storage: its step 3 is latest now.
  RequireAllOk(d.RunRanks("back", "save", 1, 3, 1));
  list = d.Ckptctl({"list", "back"});
  INFO(list.output);
  CHECK(StepsIn(list.output, "durable         latest") == std::vector<std::string>{"3"});
  for (const ExitInfo& r : d.RunRanks("back", "load", 1, -1, 1, 1)) {
    INFO(r.output);
    CHECK(absl::StrContains(r.output, "loaded step 3"));
    CHECK(absl::StrContains(r.output, "tiers=durable"));
  }
}

TEST_CASE("ckptd SIGKILLed while persisting from memory leaves storage as it was",
          "[memory_tier]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag()}).ok());
  RequireAllOk(d.RunRanks("kill", "save", 2, 1, 1));  // a durable step before
  d.Kill();
  REQUIRE(d.Start({BudgetFlag(), "--fault_kill_at=persist.copied"}).ok());
  // The trainer is told step 2 saved once it is in memory; the daemon dies
  // with its copy on storage not yet committed.
  RequireAllOk(d.RunRanks("kill", "save", 2, 2, 1, 0, {"--tier=both"}));
  const ExitInfo daemon = d.WaitExit();
  REQUIRE(daemon.signal == SIGKILL);
  REQUIRE(absl::StrContains(daemon.output, "fault point persist.copied"));
  REQUIRE(d.Start({BudgetFlag()}).ok());
  // Memory went with the daemon; storage holds step 1 only, no partial.
  CHECK(ListedSteps(d, "kill") == std::vector<int64_t>{1});
  for (const std::string& entry : ListDir(d.job_dir("kill"))) {
    CHECK(entry.find(".partial-") == std::string::npos);
  }
  for (const ExitInfo& r : d.RunRanks("kill", "load", 2, -1, 1, 2)) {
    INFO(r.output);
    CHECK(r.ok());
    CHECK(absl::StrContains(r.output, "loaded step 1"));
    CHECK(absl::StrContains(r.output, "tiers=durable"));
  }
}

TEST_CASE("a step persisted late never takes latest from a newer one", "[memory_tier]") {
  TestDaemon d;
  // The persist of step 10 stops for a while with its copy made, so the
  // trainer's next step (11, to storage) commits first.
  REQUIRE(d.Start({BudgetFlag(), "--fault_kill_at=persist.copied", "--fault_pause_s=5"}).ok());
  RequireAllOk(d.RunRanks("late", "save", 1, 10, 1, 0, {"--tier=both"}));
  REQUIRE(d.WaitForOutput("fault point persist.copied reached, pausing"));
  RequireAllOk(d.RunRanks("late", "save", 1, 11, 1));
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_persists() == 1; }));
  CHECK(ListedSteps(d, "late") == std::vector<int64_t>{10, 11});
  std::ifstream latest(d.job_dir("late") + "/LATEST");
  std::string text((std::istreambuf_iterator<char>(latest)), std::istreambuf_iterator<char>());
  CHECK(text == "11\n");
  for (const ExitInfo& r : d.RunRanks("late", "load", 1, -1, 1, 1, {"--from=durable"})) {
    INFO(r.output);
    CHECK(absl::StrContains(r.output, "loaded step 11"));
  }
}

}  // namespace ckpt::testing
