// Which store a load takes (coordinator/tier_choice.h), over two real
// catalogs with real commits: the rule every load path of ckpt shares.
#include "daemon/coordinator/tier_choice.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/commit.h"
#include "daemon/coordinator/committer.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

// `created_unix_ms`: when its save was planned (0: unset, as old manifests).
void CommitStep(storage::Backend& backend, const std::string& job, int64_t step,
                int64_t created_unix_ms = 0) {
  const std::string data = "0123456789";
  const std::string partial =
      storage::PartialDir("/r", job, step, absl::StrCat("h0-00000000000000aa-", step));
  CKPT_REQUIRE_OK(backend.CreateDirs(partial + "/data"));
  auto file = backend.NewWritableFile(partial + "/data/h0-0.bin");
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteAt(0, data.data(), data.size()));
  CKPT_REQUIRE_OK((*file)->Close());
  v1::CheckpointManifest manifest = planning::testing::ManifestOf(job, step, data, 4);
  manifest.set_created_unix_ms(created_unix_ms);
  CKPT_REQUIRE_OK(CommitCheckpoint(backend, "/r", partial, manifest));
}

struct TwoStores {
  std::unique_ptr<storage::Backend> disk = storage::NewMemoryBackend();
  std::unique_ptr<storage::Backend> memory = storage::NewMemoryBackend();
  Catalog durable{*disk, "/r"};
  Catalog held{*memory, "/r"};
  TwoStores() {
    CKPT_REQUIRE_OK(disk->CreateDirs("/r"));
    CKPT_REQUIRE_OK(memory->CreateDirs("/r"));
  }
  absl::StatusOr<std::optional<int64_t>> Choose(int64_t step, v1::LoadTier from) {
    return MemoryStepToLoad(durable, &held, "job", step, from, "this ckptd");
  }
};

TEST_CASE("latest is the newest step of either store, memory's when both hold it",
          "[tier_choice]") {
  TwoStores s;
  CommitStep(*s.disk, "job", 10);
  CommitStep(*s.memory, "job", 20);
  CHECK(*s.Choose(-1, v1::LOAD_TIER_ANY) == std::optional<int64_t>(20));
  CommitStep(*s.disk, "job", 30);  // storage now has a newer one
  CHECK(*s.Choose(-1, v1::LOAD_TIER_ANY) == std::nullopt);
  CommitStep(*s.memory, "job", 30);  // both: memory reads faster
  CHECK(*s.Choose(-1, v1::LOAD_TIER_ANY) == std::optional<int64_t>(30));
  // A named step: memory when it holds it, else storage.
  CHECK(*s.Choose(20, v1::LOAD_TIER_ANY) == std::optional<int64_t>(20));
  CHECK(*s.Choose(10, v1::LOAD_TIER_ANY) == std::nullopt);
  // Asked for durable: never memory. Asked for memory: memory or an error.
  CHECK(*s.Choose(30, v1::LOAD_TIER_DURABLE) == std::nullopt);
  CHECK(*s.Choose(-1, v1::LOAD_TIER_MEMORY) == std::optional<int64_t>(30));
  absl::StatusOr<std::optional<int64_t>> missing = s.Choose(10, v1::LOAD_TIER_MEMORY);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("in the memory tier") != absl::string_view::npos);
}

TEST_CASE("without a memory tier a load of memory names whose tier is missing", "[tier_choice]") {
  TwoStores s;
  CommitStep(*s.disk, "job", 1);
  CHECK(*MemoryStepToLoad(s.durable, nullptr, "job", -1, v1::LOAD_TIER_ANY, "x") == std::nullopt);
  absl::StatusOr<std::optional<int64_t>> refused =
      MemoryStepToLoad(s.durable, nullptr, "job", -1, v1::LOAD_TIER_MEMORY, "the coordinator");
  REQUIRE(absl::IsFailedPrecondition(refused.status()));
  CHECK(refused.status().message().find("the coordinator has none") != absl::string_view::npos);
}

TEST_CASE("saved after: the later plan, the higher step on a tie", "[tier_choice]") {
  CHECK(SavedAfter({3, 200}, {5, 100}));
  CHECK_FALSE(SavedAfter({5, 100}, {3, 200}));
  CHECK(SavedAfter({7, 100}, {5, 100}));
  CHECK_FALSE(SavedAfter({5, 100}, {5, 100}));
}

TEST_CASE("a rollback is latest across the stores, whichever holds it", "[tier_choice]") {
  TwoStores s;
  CHECK(absl::IsNotFound(LatestOfTiers(s.durable, &s.held, "job").status()));
  CommitStep(*s.disk, "job", 30, /*created_unix_ms=*/1000);
  CHECK(*LatestOfTiers(s.durable, &s.held, "job") == 30);
  CHECK(*LatestOfTiers(s.durable, nullptr, "job") == 30);
  // The trainer went back to step 19 and saved step 20 to memory after 30.
  CommitStep(*s.memory, "job", 20, 2000);
  CHECK(*LatestOfTiers(s.durable, &s.held, "job") == 20);
  CHECK(*s.Choose(-1, v1::LOAD_TIER_ANY) == std::optional<int64_t>(20));
  // Then to storage again, lower still: storage's is the latest.
  CommitStep(*s.disk, "job", 15, 3000);
  CHECK(*LatestOfTiers(s.durable, &s.held, "job") == 15);
  CHECK(*s.Choose(-1, v1::LOAD_TIER_ANY) == std::nullopt);
}

TEST_CASE("a copy committed late is latest when it was saved last", "[tier_choice]") {
  TwoStores s;
  Committer committer(*s.disk, s.durable);
  CommitStep(*s.disk, "job", 30, /*created_unix_ms=*/1000);
  auto copy_of = [&](int64_t step, int64_t created) {
    v1::CheckpointManifest manifest = planning::testing::ManifestOf("job", step, "0123456789", 4);
    manifest.set_created_unix_ms(created);
    return committer.CommitCopy(manifest, [&](const std::string& partial) -> absl::Status {
      if (absl::Status made = s.disk->CreateDirs(partial + "/data"); !made.ok()) return made;
      auto file = s.disk->NewWritableFile(partial + "/data/h0-0.bin");
      if (!file.ok()) return file.status();
      if (absl::Status wrote = (*file)->WriteAt(0, "0123456789", 10); !wrote.ok()) return wrote;
      return (*file)->Close();
    });
  };
  // Saved before step 30 (persisted late): committed, not latest.
  CKPT_REQUIRE_OK(copy_of(10, 500).status());
  CHECK(*s.durable.ResolveStep("job", -1) == 30);
  // A rollback saved after it: latest, though lower.
  CKPT_REQUIRE_OK(copy_of(20, 2000).status());
  CHECK(*s.durable.ResolveStep("job", -1) == 20);
  // One from the future would outrank every later save: refused.
  const int64_t tomorrow = absl::ToUnixMillis(absl::Now() + absl::Hours(24));
  CKPT_REQUIRE_ERROR(copy_of(40, tomorrow).status(), absl::StatusCode::kInvalidArgument,
                     "from now: not committed");
  CHECK(*s.durable.ResolveStep("job", -1) == 20);
  CHECK_FALSE(*s.durable.StepExists("job", 40));
}

}  // namespace
}  // namespace ckpt::coordinator
