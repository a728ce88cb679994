// Leases as locks across processes (s3_leases.h) against the real server:
// two S3Leases are two processes, each with its own holder id.
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/epoch_fence.h"
#include "daemon/storage/s3/s3_backend.h"
#include "daemon/storage/s3/s3_leases.h"
#include "tests/catch.h"
#include "tests/support/s3_server.h"
#include "tests/unit/daemon/storage/test_util.h"

namespace ckpt::storage::s3 {
namespace {

using ckpt::testing::TestS3ClientOptions;

constexpr char kKey[] = "job/step-5/COMMIT";
const std::string kPrefix = std::string(kKey) + ".leases/";

std::vector<std::string> Leases(S3Client& client, const std::string& bucket) {
  absl::StatusOr<Listing> listing = client.List(bucket, kPrefix, "");
  CKPT_REQUIRE_OK(listing);
  std::vector<std::string> names;
  for (const ListedObject& o : listing->objects) names.push_back(o.key.substr(kPrefix.size()));
  return names;
}

TEST_CASE("lease names: only what ckpt writes parses", "[s3_plan]") {
  std::optional<LeaseName> name = ParseLeaseName("x.00ff.1700000000000");
  REQUIRE(name.has_value());
  CHECK(name->exclusive);
  CHECK(name->id == "00ff");
  CHECK(name->expiry_ms == 1700000000000);
  CHECK(ParseLeaseName("s.ab.1").has_value());
  for (const char* bad : {"", "s", "s.ab", "q.ab.1", "s..1", "s.zz.1", "s.ab.-1", "s.ab.1.2",
                          "s.ab.99999999999999999999", "s.ab.1x"}) {
    INFO(bad);
    CHECK(!ParseLeaseName(bad).has_value());
  }
}

TEST_CASE("S3 leases: shared ones share, exclusive ones exclude, across holders", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("leases");
  S3Client client(TestS3ClientOptions());
  S3Leases a(TestS3ClientOptions(), bucket), b(TestS3ClientOptions(), bucket);
  {
    auto shared_a = a.Acquire(kKey, LockMode::kShared, /*wait=*/false, "pin A");
    CKPT_REQUIRE_OK(shared_a);
    auto shared_b = b.Acquire(kKey, LockMode::kShared, false, "pin B");
    CKPT_REQUIRE_OK(shared_b);
    CHECK(Leases(client, bucket).size() == 2);
    const auto exclusive = b.Acquire(kKey, LockMode::kExclusive, false, "gc B");
    CHECK(exclusive.status().code() == absl::StatusCode::kUnavailable);
    CHECK(exclusive.status().message().find("gc B") != std::string::npos);
    // The refused one left nothing behind.
    CHECK(Leases(client, bucket).size() == 2);
  }
  CHECK(Leases(client, bucket).empty());

  auto exclusive = a.Acquire(kKey, LockMode::kExclusive, false, "gc A");
  CKPT_REQUIRE_OK(exclusive);
  CHECK(b.Acquire(kKey, LockMode::kShared, false, "pin B").status().code() ==
        absl::StatusCode::kUnavailable);
  CHECK(b.Acquire(kKey, LockMode::kExclusive, false, "gc B").status().code() ==
        absl::StatusCode::kUnavailable);
  // A waiting pin gets the lock once, and only once, the exclusive one goes.
  std::atomic<bool> got{false};
  absl::Status waited;
  std::thread waiter([&] {
    auto pin = b.Acquire(kKey, LockMode::kShared, /*wait=*/true, "pin B");
    waited = pin.status();
    got = true;
  });
  CHECK(!got.load());
  exclusive->reset();
  waiter.join();
  CHECK(waited.ok());
  CHECK(Leases(client, bucket).empty());
}

TEST_CASE("S3 leases: a dead holder's lease lapses; a live one holds; foreign names are ignored",
          "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("lapses");
  S3Client client(TestS3ClientOptions());
  LeaseOptions options;
  options.clock_skew = absl::Seconds(30);
  S3Leases leases(TestS3ClientOptions(), bucket, options);
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  // Expired beyond the skew: its holder died.
  const std::string dead = absl::StrCat(kPrefix, "s.dead.", now_ms - 31000);
  CKPT_REQUIRE_OK(client.PutObject(bucket, dead, ""));
  CKPT_REQUIRE_OK(client.PutObject(bucket, kPrefix + "not-a-lease", ""));
  // Further ahead than any holder writes: not a pin, whatever it claims.
  const std::string bogus = absl::StrCat(kPrefix, "x.b0905.", now_ms + 86400000);
  CKPT_REQUIRE_OK(client.PutObject(bucket, bogus, ""));
  {
    auto gc = leases.Acquire(kKey, LockMode::kExclusive, false, "gc");
    CKPT_REQUIRE_OK(gc);
  }
  // The dead lease was cleared; the foreign object is not ckpt's to touch.
  CHECK(Leases(client, bucket) ==
        std::vector<std::string>{"not-a-lease", bogus.substr(kPrefix.size())});
  // Expired, but within the skew another host's clock may have: it holds.
  const std::string late = absl::StrCat(kPrefix, "s.1a7e.", now_ms - 5000);
  CKPT_REQUIRE_OK(client.PutObject(bucket, late, ""));
  CHECK(leases.Acquire(kKey, LockMode::kExclusive, false, "gc").status().code() ==
        absl::StatusCode::kUnavailable);
  // A waiting exclusive lock gives up at its limit, naming the lease.
  LeaseOptions brief = options;
  brief.wait_limit = absl::Milliseconds(300);
  S3Leases impatient(TestS3ClientOptions(), bucket, brief);
  const auto timed_out = impatient.Acquire(kKey, LockMode::kExclusive, true, "gc");
  CHECK(timed_out.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(timed_out.status().message().find("s.1a7e.") != std::string::npos);
}

TEST_CASE("S3 leases: a holder renews its lease, and its release leaves none", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("renew");
  S3Client client(TestS3ClientOptions());
  LeaseOptions options;
  options.ttl = absl::Seconds(3);
  options.renew_every = absl::Milliseconds(100);
  S3Leases leases(TestS3ClientOptions(), bucket, options);
  auto pin = leases.Acquire(kKey, LockMode::kShared, false, "pin");
  CKPT_REQUIRE_OK(pin);
  std::vector<std::string> first = Leases(client, bucket);
  REQUIRE(first.size() == 1);
  const int64_t first_expiry = ParseLeaseName(first[0])->expiry_ms;
  // Renewed: a lease with a later expiry replaces it (polled, 20 s at most).
  int64_t latest = first_expiry;
  for (absl::Time give_up = absl::Now() + absl::Seconds(20);
       latest == first_expiry && absl::Now() < give_up;) {
    for (const std::string& name : Leases(client, bucket)) {
      latest = std::max(latest, ParseLeaseName(name)->expiry_ms);
    }
  }
  CHECK(latest > first_expiry);
  pin->reset();
  CHECK(Leases(client, bucket).empty());
}

}  // namespace
}  // namespace ckpt::storage::s3

// The commit fence of coordinator failover on an object store: EPOCH.lock
// is held through lease objects, so two coordinators (two backends) exclude
// each other; an older epoch is refused; the job's steps list as before.
namespace ckpt::storage::s3 {
namespace {

std::unique_ptr<S3Backend> OnBucket(const std::string& bucket) {
  S3BackendOptions options;
  options.client = TestS3ClientOptions();
  options.bucket = bucket;
  absl::StatusOr<std::unique_ptr<S3Backend>> backend = NewS3Backend(options);
  CKPT_REQUIRE_OK(backend);
  return std::move(*backend);
}

TEST_CASE("the epoch fence on S3: one coordinator at a time, older epochs refused", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("fence");
  std::unique_ptr<S3Backend> first = OnBucket(bucket);
  std::unique_ptr<S3Backend> second = OnBucket(bucket);
  const std::string root = "s3://" + bucket;
  const std::string job = root + "/job";
  {
    absl::StatusOr<std::unique_ptr<coordinator::EpochFence>> held =
        coordinator::EnterEpochFence(*first, job, 4, nullptr);
    CKPT_REQUIRE_OK(held);
    absl::StatusOr<std::unique_ptr<coordinator::EpochFence>> blocked = coordinator::EnterEpochFence(
        *second, job, 6, nullptr, {.lock_wait = absl::Milliseconds(300)});
    CHECK(blocked.status().code() == absl::StatusCode::kUnavailable);
  }
  absl::StatusOr<std::unique_ptr<coordinator::EpochFence>> newer =
      coordinator::EnterEpochFence(*second, job, 6, nullptr);
  CKPT_REQUIRE_OK(newer);
  newer->reset();
  absl::StatusOr<int64_t> stored = coordinator::ReadJobEpoch(*first, job);
  CKPT_REQUIRE_OK(stored);
  CHECK(*stored == 6);
  const absl::Status stale = coordinator::EnterEpochFence(*first, job, 4, nullptr).status();
  CHECK(coordinator::IsFencedCommit(stale));
  // The fence's objects are no steps.
  coordinator::Catalog catalog(*first, root);
  absl::StatusOr<std::vector<int64_t>> steps = catalog.ListSteps("job");
  CKPT_REQUIRE_OK(steps);
  CHECK(steps->empty());
}

}  // namespace
}  // namespace ckpt::storage::s3
