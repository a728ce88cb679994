// The epoch fence of commits (coordinator/epoch_fence.h) on a real
// filesystem: the highest epoch that committed to a job is kept, an older
// one is refused and counted, the fence's lock excludes a second commit of
// the job (across Backends, as two coordinator processes would hold it),
// and a damaged EPOCH never opens the fence.
#include "daemon/coordinator/epoch_fence.h"

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/storage/backend.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "tests/catch.h"

namespace ckpt::coordinator {
namespace {

struct TempRoot {
  TempRoot() {
    char tmpl[] = "/tmp/ckpt-fence-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempRoot() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string path;
};

std::unique_ptr<storage::Backend> Posix() {
  absl::StatusOr<std::unique_ptr<storage::Backend>> b = storage::NewBackend("posix");
  REQUIRE(b.ok());
  return std::move(*b);
}

std::string EpochFile(storage::Backend& backend, const std::string& job_dir) {
  absl::StatusOr<std::string> s =
      storage::ReadWholeFile(backend, job_dir + "/" + storage::kEpochName, 64);
  return s.ok() ? *s : s.status().ToString();
}

TEST_CASE("the fence keeps the highest epoch and refuses older ones", "[epoch_fence]") {
  TempRoot root;
  std::unique_ptr<storage::Backend> backend = Posix();
  const std::string job = root.path + "/job";
  REQUIRE(backend->CreateDirs(job).ok());

  absl::StatusOr<int64_t> none = ReadJobEpoch(*backend, job);
  REQUIRE(none.ok());
  CHECK(*none == 0);
  {
    absl::StatusOr<std::unique_ptr<EpochFence>> fence = EnterEpochFence(*backend, job, 5, nullptr);
    REQUIRE(fence.ok());
    CHECK((*fence)->stored_before() == 0);
  }
  CHECK(EpochFile(*backend, job) == "5\n");
  {
    // The same term commits again: nothing to advance.
    absl::StatusOr<std::unique_ptr<EpochFence>> fence = EnterEpochFence(*backend, job, 5, nullptr);
    REQUIRE(fence.ok());
    CHECK((*fence)->stored_before() == 5);
  }
  absl::StatusOr<std::unique_ptr<EpochFence>> stale = EnterEpochFence(*backend, job, 4, nullptr);
  REQUIRE_FALSE(stale.ok());
  CHECK(IsFencedCommit(stale.status()));
  CHECK(absl::IsFailedPrecondition(stale.status()));
  CHECK(stale.status().message().find("epoch 5") != std::string::npos);
  CHECK(stale.status().message().find("epoch 4") != std::string::npos);
  CHECK(EpochFile(*backend, job) == "5\n");
  {
    absl::StatusOr<std::unique_ptr<EpochFence>> newer = EnterEpochFence(*backend, job, 9, nullptr);
    REQUIRE(newer.ok());
  }
  CHECK(EpochFile(*backend, job) == "9\n");
  CHECK(IsFencedCommit(EnterEpochFence(*backend, job, 5, nullptr).status()));
}

TEST_CASE("a coordinator that no longer leads is refused inside the fence", "[epoch_fence]") {
  TempRoot root;
  std::unique_ptr<storage::Backend> backend = Posix();
  const std::string job = root.path + "/job";
  REQUIRE(backend->CreateDirs(job).ok());
  absl::StatusOr<std::unique_ptr<EpochFence>> fence = EnterEpochFence(
      *backend, job, 3, [] { return absl::FailedPreconditionError("its lease lapsed"); });
  REQUIRE_FALSE(fence.ok());
  CHECK(IsFencedCommit(fence.status()));
  CHECK(fence.status().message().find("its lease lapsed") != std::string::npos);
}

TEST_CASE("the fence's lock admits one commit of a job at a time, across processes' opens",
          "[epoch_fence]") {
  TempRoot root;
  // Two backends: flock(2) excludes two opens of the file, as two
  // coordinator processes on a shared filesystem hold it.
  std::unique_ptr<storage::Backend> first = Posix();
  std::unique_ptr<storage::Backend> second = Posix();
  const std::string job = root.path + "/job";
  REQUIRE(first->CreateDirs(job).ok());
  absl::StatusOr<std::unique_ptr<EpochFence>> held = EnterEpochFence(*first, job, 2, nullptr);
  REQUIRE(held.ok());
  absl::StatusOr<std::unique_ptr<EpochFence>> blocked =
      EnterEpochFence(*second, job, 3, nullptr, {.lock_wait = absl::Milliseconds(200)});
  REQUIRE_FALSE(blocked.ok());
  CHECK(absl::IsUnavailable(blocked.status()));
  CHECK(blocked.status().message().find(storage::kFenceLockName) != std::string::npos);
  CHECK_FALSE(IsFencedCommit(blocked.status()));
  held->reset();  // the first commit ends
  absl::StatusOr<std::unique_ptr<EpochFence>> next = EnterEpochFence(*second, job, 3, nullptr);
  REQUIRE(next.ok());
  CHECK(EpochFile(*second, job) == "3\n");
}

TEST_CASE("a damaged EPOCH refuses every commit instead of opening the fence", "[epoch_fence]") {
  TempRoot root;
  std::unique_ptr<storage::Backend> backend = Posix();
  const std::string job = root.path + "/job";
  REQUIRE(backend->CreateDirs(job).ok());
  for (const std::string& contents :
       std::vector<std::string>{"", "x\n", "-3\n", "007\n", std::string(100, '9')}) {
    INFO("EPOCH holds '" << contents << "'");
    REQUIRE(storage::WriteFileAtomically(*backend, job + "/" + storage::kEpochName, contents).ok());
    absl::StatusOr<std::unique_ptr<EpochFence>> fence = EnterEpochFence(*backend, job, 99, nullptr);
    REQUIRE_FALSE(fence.ok());
    CHECK_FALSE(IsFencedCommit(fence.status()));
    CHECK(fence.status().message().find(storage::kEpochName) != std::string::npos);
  }
}

}  // namespace
}  // namespace ckpt::coordinator
