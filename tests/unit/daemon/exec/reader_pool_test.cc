// The daemon-wide reader pool: every task runs once, on a fixed set of
// threads; stopping drops (destroys without running) what has not started
// and refuses later tasks.
#include "daemon/exec/reader_pool.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "tests/catch.h"

namespace ckpt::exec {
namespace {

TEST_CASE("every task runs exactly once, on the pool's threads only", "[server][readers]") {
  constexpr int kTasks = 10'000;
  std::vector<std::atomic<int>> runs(kTasks);
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::atomic<int> done{0};
  absl::Notification all_done;
  {
    ReaderPool pool(3);
    CHECK(pool.threads() == 3);
    for (int i = 0; i < kTasks; ++i) {
      REQUIRE(pool.Submit([&, i] {
        runs[i].fetch_add(1);
        {
          std::lock_guard<std::mutex> lock(mu);
          threads.insert(std::this_thread::get_id());
        }
        if (done.fetch_add(1) + 1 == kTasks) all_done.Notify();
      }));
    }
    all_done.WaitForNotification();
  }
  for (int i = 0; i < kTasks; ++i) CHECK(runs[i].load() == 1);
  CHECK(threads.size() <= 3);
  CHECK(threads.count(std::this_thread::get_id()) == 0);
}

TEST_CASE("a task may queue the next one (a load's group after group)", "[server][readers]") {
  ReaderPool pool(1);
  std::atomic<int> left{100};
  absl::Notification finished;
  std::function<void()> step = [&] {
    if (left.fetch_sub(1) == 1) {
      finished.Notify();
      return;
    }
    REQUIRE(pool.Submit(step));
  };
  REQUIRE(pool.Submit(step));
  finished.WaitForNotification();
  CHECK(left.load() == 0);
}

TEST_CASE("Stop drops queued tasks unrun, releases what they hold, refuses new ones",
          "[server][readers]") {
  ReaderPool pool(1);
  absl::Notification started, release;
  REQUIRE(pool.Submit([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();  // the only thread is busy from here on
  auto held = std::make_shared<int>(7);
  std::weak_ptr<int> watch = held;
  std::atomic<bool> ran{false};
  REQUIRE(pool.Submit([held, &ran] { ran = true; }));
  held.reset();
  CHECK_FALSE(watch.expired());  // the queued task holds it
  std::thread stopper([&] { pool.Stop(); });
  // Stop drops the queue at once, then waits for the running task.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!watch.expired() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  CHECK(watch.expired());
  release.Notify();
  stopper.join();
  CHECK_FALSE(ran.load());
  CHECK_FALSE(pool.Submit([&ran] { ran = true; }));
  CHECK_FALSE(ran.load());
  pool.Stop();  // idempotent
}

}  // namespace
}  // namespace ckpt::exec
