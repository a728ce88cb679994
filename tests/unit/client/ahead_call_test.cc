// AheadCall (client/src/ahead_call.h), what a save asks its next batch on:
// every call runs on the one thread the object owns, in order, while the
// owner goes on (the call may wait for the owner's next step, as a next
// batch waits for a submit); each result or error comes back to Take, and
// nothing the call reads may go before it ends.
#include "client/src/ahead_call.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "tests/catch.h"

namespace ckpt::client {
namespace {

TEST_CASE("AheadCall runs each call on its one thread and returns its result", "[ahead]") {
  AheadCall<int> ahead;
  std::vector<std::thread::id> ran_on;
  for (int i = 0; i < 5; ++i) {
    ahead.Start([&ran_on, i]() -> absl::StatusOr<int> {
      ran_on.push_back(std::this_thread::get_id());
      return i * 10;
    });
    absl::StatusOr<int> got = ahead.Take();
    REQUIRE(got.ok());
    CHECK(*got == i * 10);
  }
  REQUIRE(ran_on.size() == 5);
  // One thread for the object's life, not one per call, and not the owner's.
  for (const std::thread::id& id : ran_on) CHECK(id == ran_on.front());
  CHECK(ran_on.front() != std::this_thread::get_id());
}

TEST_CASE("AheadCall hands back a failing call's status", "[ahead]") {
  AheadCall<int> ahead;
  ahead.Start([]() -> absl::StatusOr<int> { return absl::UnavailableError("daemon gone"); });
  absl::StatusOr<int> got = ahead.Take();
  CHECK(got.status() == absl::UnavailableError("daemon gone"));
  // The next call after a failure still runs.
  ahead.Start([]() -> absl::StatusOr<int> { return 7; });
  got = ahead.Take();
  REQUIRE(got.ok());
  CHECK(*got == 7);
}

TEST_CASE("AheadCall's call may wait for what the owner does after Start", "[ahead]") {
  // A save's next batch may wait for the submit of this one: Start must
  // return before the call ends, or the owner never submits.
  AheadCall<int> ahead;
  absl::Notification submitted;
  ahead.Start([&submitted]() -> absl::StatusOr<int> {
    submitted.WaitForNotification();
    return 1;
  });
  submitted.Notify();
  absl::StatusOr<int> got = ahead.Take();
  REQUIRE(got.ok());
  CHECK(*got == 1);
}

TEST_CASE("AheadCall settles a call not taken before it goes on", "[ahead]") {
  absl::Notification go;
  std::atomic<bool> finished{false};
  auto slow = [&]() -> absl::StatusOr<int> {
    go.WaitForNotification();
    finished = true;
    return 0;
  };
  {
    AheadCall<int> ahead;
    ahead.Start(slow);
    go.Notify();
    ahead.Settle();
    CHECK(finished);  // Settle returned only once the call had ended
    CHECK(ahead.Take().status().code() == absl::StatusCode::kFailedPrecondition);
  }
  finished = false;
  {
    // An owner returning early: the call ends before the object does.
    AheadCall<int> ahead;
    ahead.Start(slow);
  }
  CHECK(finished);
}

}  // namespace
}  // namespace ckpt::client
