// The disk quota's decision and its ledger of reservations, called directly.
#include "daemon/session/disk_reservations.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "tests/catch.h"

namespace ckpt::session {
namespace {

DiskReservations::CommittedBytes Committed(uint64_t bytes) {
  return [bytes]() -> absl::StatusOr<uint64_t> { return bytes; };
}

TEST_CASE("DecideDiskReservation: committed + reserved + asked within the quota", "[quota]") {
  CHECK(DecideDiskReservation("j", 0, 0, 1 << 20, 0).ok());  // no limit
  CHECK(DecideDiskReservation("j", 40, 30, 30, 100).ok());   // exactly full
  const absl::Status over = DecideDiskReservation("j", 40, 30, 31, 100);
  CHECK(absl::IsResourceExhausted(over));
  // The refusal says whose, how much of each, and which flag.
  for (const char* part : {"job j ", "40 bytes of committed", "30 reserved", "asks 31",
                           "quota of 100", "--job_max_disk_bytes"}) {
    INFO(over.message() << " lacks " << part);
    CHECK(absl::StrContains(over.message(), part));
  }
  // Sums past 2^64 do not wrap into a fit.
  CHECK(absl::IsResourceExhausted(DecideDiskReservation("j", UINT64_MAX, 1, 1, UINT64_MAX)));
  CHECK(absl::IsResourceExhausted(DecideDiskReservation("j", 1, 1, UINT64_MAX, UINT64_MAX)));
  CHECK(absl::IsResourceExhausted(DecideDiskReservation("j", 0, 0, 101, 100)));
}

TEST_CASE("a reservation counts until it is dropped, per job", "[quota]") {
  DiskReservations ledger;
  auto first = ledger.Reserve("a", 60, 100, Committed(0));
  REQUIRE(first.ok());
  CHECK(ledger.reserved("a") == 60);
  // The same job: 60 reserved + 60 asked > 100.
  CHECK(absl::IsResourceExhausted(ledger.Reserve("a", 60, 100, Committed(0)).status()));
  // Another job has its own quota.
  CHECK(ledger.Reserve("b", 60, 100, Committed(0)).ok());
  first->reset();  // its save failed, committed, or its session was dropped
  CHECK(ledger.reserved("a") == 0);
  CHECK(ledger.Reserve("a", 60, 100, Committed(0)).ok());
  // What the catalog counts counts too.
  CHECK(absl::IsResourceExhausted(ledger.Reserve("a", 60, 100, Committed(41)).status()));
}

TEST_CASE("a reservation released while the catalog is read is not lost", "[quota]") {
  DiskReservations ledger;
  // A save of 3 bytes is in flight; it commits while the next admission
  // lists the catalog, whose listing was taken just before the commit.
  auto in_flight = ledger.Reserve("j", 3, 5, Committed(0));
  REQUIRE(in_flight.ok());
  int reads = 0;
  auto racing = [&]() -> absl::StatusOr<uint64_t> {
    if (++reads == 1) {
      in_flight->reset();  // committed: the catalog counts it from now on
      return 0;            // ...but this listing was taken before
    }
    return 3;
  };
  // 3 committed + 3 asked > 5: refused, never admitted on the stale listing.
  CHECK(absl::IsResourceExhausted(ledger.Reserve("j", 3, 5, racing).status()));
  CHECK(reads == 2);  // read again once the bytes in between stood in the way
  CHECK(ledger.reserved("j") == 0);
}

TEST_CASE("admissions racing on threads never reserve past the quota", "[quota]") {
  DiskReservations ledger;
  constexpr int kThreads = 8;
  for (int round = 0; round < 50; ++round) {
    std::vector<std::unique_ptr<DiskReservations::Reservation>> held(kThreads);
    std::atomic<int> admitted{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        auto r = ledger.Reserve("j", 10, 35, Committed(0));
        if (r.ok()) {
          held[i] = std::move(*r);
          admitted.fetch_add(1);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    CHECK(admitted.load() == 3);
    CHECK(ledger.reserved("j") == 30);
  }
  CHECK(ledger.reserved("j") == 0);
}

TEST_CASE("a reservation may outlive the ledger that made it", "[quota]") {
  std::unique_ptr<DiskReservations::Reservation> kept;
  {
    DiskReservations ledger;
    auto r = ledger.Reserve("j", 1, 10, Committed(0));
    REQUIRE(r.ok());
    kept = std::move(*r);
  }
  kept.reset();  // the memory tier's queued persists drop theirs last
}

TEST_CASE("an error reading the catalog refuses with context", "[quota]") {
  DiskReservations ledger;
  auto broken = []() -> absl::StatusOr<uint64_t> { return absl::UnavailableError("disk gone"); };
  const absl::Status s = ledger.Reserve("j", 1, 10, broken).status();
  CHECK(absl::IsUnavailable(s));
  CHECK(absl::StrContains(s.message(), "disk quota"));
  CHECK(ledger.reserved("j") == 0);
}

}  // namespace
}  // namespace ckpt::session
