#include "daemon/auth/job_owners.h"

#include "daemon/storage/backend_factory.h"
#include "tests/catch.h"

namespace ckpt::auth {
namespace {

TEST_CASE("the first uid to claim a job owns it, and the record outlives the daemon", "[auth]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  REQUIRE(backend->CreateDirs("/root").ok());
  {
    JobOwners owners(*backend, "/root");
    absl::StatusOr<std::optional<uid_t>> none = owners.Owner("job");
    REQUIRE(none.ok());
    CHECK_FALSE(none->has_value());
    REQUIRE(owners.Claim("job", 1001).ok());
    CHECK(owners.Claim("job", 1001).ok());
    const absl::Status other = owners.Claim("job", 1002);
    CHECK(absl::IsPermissionDenied(other));
    CHECK(other.message().find("belongs to uid 1001") != absl::string_view::npos);
    // Held in memory until the job saves: nothing on storage yet.
    CHECK_FALSE(*backend->Exists("/root/job/OWNER"));
    REQUIRE(owners.Persist("job").ok());
    CHECK(*backend->Exists("/root/job/OWNER"));
  }
  // A new daemon on the same root reads the record.
  JobOwners again(*backend, "/root");
  absl::StatusOr<std::optional<uid_t>> owner = again.Owner("job");
  REQUIRE(owner.ok());
  REQUIRE(owner->has_value());
  CHECK(**owner == 1001);
  CHECK(absl::IsPermissionDenied(again.Claim("job", 1002)));
}

TEST_CASE("a claim never saved is forgotten with the job's last rank", "[auth]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  REQUIRE(backend->CreateDirs("/root").ok());
  JobOwners owners(*backend, "/root");
  REQUIRE(owners.Claim("scratch", 1001).ok());
  CHECK(absl::IsPermissionDenied(owners.Claim("scratch", 1002)));
  owners.Forget("scratch");
  // No directory was made for it, and another user may take the name.
  CHECK_FALSE(*backend->Exists("/root/scratch"));
  CHECK(owners.Claim("scratch", 1002).ok());
  // Forget leaves a recorded owner alone.
  REQUIRE(owners.Persist("scratch").ok());
  owners.Forget("scratch");
  CHECK(absl::IsPermissionDenied(owners.Claim("scratch", 1001)));
}

TEST_CASE("a damaged owner record is an error, never an unowned job", "[auth]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  REQUIRE(backend->CreateDirs("/root/job").ok());
  auto file = backend->NewWritableFile("/root/job/OWNER");
  REQUIRE(file.ok());
  REQUIRE((*file)->WriteAt(0, "uid x\n", 6).ok());
  REQUIRE((*file)->Close().ok());
  JobOwners owners(*backend, "/root");
  CHECK(absl::IsDataLoss(owners.Owner("job").status()));
  CHECK(absl::IsDataLoss(owners.Claim("job", 1001)));
}

}  // namespace
}  // namespace ckpt::auth
