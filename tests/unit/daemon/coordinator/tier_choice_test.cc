// Which store a load takes (coordinator/tier_choice.h), over two real
// catalogs with real commits: the rule every load path of ckpt shares.
#include "daemon/coordinator/tier_choice.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/commit.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

void CommitStep(storage::Backend& backend, const std::string& job, int64_t step) {
  const std::string data = "0123456789";
  const std::string partial =
      storage::PartialDir("/r", job, step, absl::StrCat("h0-00000000000000aa-", step));
  CKPT_REQUIRE_OK(backend.CreateDirs(partial + "/data"));
  auto file = backend.NewWritableFile(partial + "/data/h0-0.bin");
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteAt(0, data.data(), data.size()));
  CKPT_REQUIRE_OK((*file)->Close());
  CKPT_REQUIRE_OK(
      CommitCheckpoint(backend, "/r", partial, planning::testing::ManifestOf(job, step, data, 4)));
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

TEST_CASE("the newest of two resolutions", "[tier_choice]") {
  const absl::StatusOr<int64_t> none = absl::NotFoundError("no step");
  CHECK(*NewestOfTiers(3, 5) == 5);
  CHECK(*NewestOfTiers(7, 5) == 7);
  CHECK(*NewestOfTiers(none, 5) == 5);
  CHECK(*NewestOfTiers(3, none) == 3);
  CHECK(absl::IsNotFound(NewestOfTiers(none, none).status()));
}

}  // namespace
}  // namespace ckpt::coordinator
