#include "daemon/auth/job_owners.h"

#include "daemon/storage/backend_factory.h"
#include "tests/catch.h"

namespace ckpt::auth {
namespace {

const Principal kAlice = Principal::LocalUser(1001);
const Principal kBob = Principal::LocalUser(1002);
const Principal kOps = Principal::Named("ops");

// Whether a job has data, as the daemon asks storage: any entry in its
// directory besides the owner record.
JobOwners::HasData DataOn(storage::Backend& backend) {
  return [&backend](const std::string& job) -> absl::StatusOr<bool> {
    absl::StatusOr<std::vector<std::string>> names = backend.ListDir("/root/" + job);
    if (absl::IsNotFound(names.status())) return false;
    if (!names.ok()) return names.status();
    for (const std::string& n : *names) {
      if (n.rfind("OWNER", 0) != 0) return true;
    }
    return false;
  };
}

TEST_CASE("the first principal to claim a new job owns it, and the record outlives the daemon",
          "[auth]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  REQUIRE(backend->CreateDirs("/root").ok());
  {
    JobOwners owners(*backend, "/root");
    absl::StatusOr<std::optional<Principal>> none = owners.Owner("job");
    REQUIRE(none.ok());
    CHECK_FALSE(none->has_value());
    REQUIRE(owners.Claim("job", kAlice).ok());
    CHECK(owners.Claim("job", kAlice).ok());
    const absl::Status other = owners.Claim("job", kBob);
    CHECK(absl::IsPermissionDenied(other));
    CHECK(other.message().find("belongs to uid 1001") != absl::string_view::npos);
    // Held in memory until the job saves: nothing on storage yet.
    CHECK_FALSE(*backend->Exists("/root/job/OWNER"));
    REQUIRE(owners.Persist("job", kAlice).ok());
    CHECK(*backend->Exists("/root/job/OWNER"));
  }
  // A new daemon on the same root reads the record.
  JobOwners again(*backend, "/root");
  absl::StatusOr<std::optional<Principal>> owner = again.Owner("job");
  REQUIRE(owner.ok());
  REQUIRE(owner->has_value());
  CHECK(**owner == kAlice);
  CHECK(absl::IsPermissionDenied(again.Claim("job", kBob)));
}

TEST_CASE("a claim never saved is forgotten with its last hold, not before", "[auth]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  REQUIRE(backend->CreateDirs("/root").ok());
  JobOwners owners(*backend, "/root");
  REQUIRE(owners.Claim("scratch", kAlice).ok());  // rank 0
  REQUIRE(owners.Claim("scratch", kAlice).ok());  // rank 1, between claim and session
  CHECK(absl::IsPermissionDenied(owners.Claim("scratch", kBob)));
  owners.Release("scratch");  // rank 0 gone: rank 1 still holds the job
  CHECK(absl::IsPermissionDenied(owners.Claim("scratch", kBob)));
  // Nor may another principal's save record it.
  CHECK(absl::IsPermissionDenied(owners.Persist("scratch", kBob)));
  owners.Release("scratch");
  // No directory was made for it, and another user may take the name.
  CHECK_FALSE(*backend->Exists("/root/scratch"));
  CHECK(owners.Claim("scratch", kBob).ok());
  // Release leaves a recorded owner alone.
  REQUIRE(owners.Persist("scratch", kBob).ok());
  owners.Release("scratch");
  CHECK(absl::IsPermissionDenied(owners.Claim("scratch", kAlice)));
  CHECK(absl::IsPermissionDenied(owners.Persist("scratch", kAlice)));
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
  CHECK(absl::IsDataLoss(owners.Claim("job", kAlice)));
}

TEST_CASE("a job with data and no record is nobody's until an admin adopts it", "[auth]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  REQUIRE(backend->CreateDirs("/root/legacy/step-00000001").ok());
  JobOwners owners(*backend, "/root", DataOn(*backend));
  // Not the first comer's, and asking twice does not make it so.
  for (const Principal& who : {kAlice, kBob, kOps, kAlice}) {
    const absl::Status s = owners.Claim("legacy", who);
    INFO(s.ToString());
    CHECK(absl::IsPermissionDenied(s));
    CHECK(s.message().find("ckptctl adopt legacy") != absl::string_view::npos);
  }
  CHECK_FALSE(*backend->Exists("/root/legacy/OWNER"));
  absl::StatusOr<std::optional<Principal>> previous = owners.Adopt("legacy", kOps, false);
  REQUIRE(previous.ok());
  CHECK_FALSE(previous->has_value());
  CHECK(owners.Claim("legacy", kOps).ok());
  CHECK(absl::IsPermissionDenied(owners.Claim("legacy", kAlice)));
  // Recorded at once, as "principal ops", for the next daemon.
  JobOwners again(*backend, "/root", DataOn(*backend));
  CHECK(**again.Owner("legacy") == kOps);
  // A second adopt without --replace does not take it over...
  CHECK(absl::IsFailedPrecondition(again.Adopt("legacy", kAlice, false).status()));
  // ...with it, it hands it over and says from whom.
  absl::StatusOr<std::optional<Principal>> handed = again.Adopt("legacy", kAlice, true);
  REQUIRE(handed.ok());
  CHECK(**handed == kOps);
  CHECK(again.Claim("legacy", kAlice).ok());
}

TEST_CASE("two daemons recording one job's owner on a shared root: one wins", "[auth]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  REQUIRE(backend->CreateDirs("/root").ok());
  JobOwners host_a(*backend, "/root");
  JobOwners host_b(*backend, "/root");
  REQUIRE(host_a.Claim("job", kAlice).ok());
  REQUIRE(host_b.Claim("job", kBob).ok());  // each host saw no record yet
  REQUIRE(host_a.Persist("job", kAlice).ok());
  const absl::Status lost = host_b.Persist("job", kBob);
  INFO(lost.ToString());
  CHECK(absl::IsPermissionDenied(lost));
  CHECK(**host_b.Owner("job") == kAlice);
  CHECK(absl::IsPermissionDenied(host_b.Claim("job", kBob)));
}

}  // namespace
}  // namespace ckpt::auth
