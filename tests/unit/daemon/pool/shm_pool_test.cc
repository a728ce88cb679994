#include "daemon/pool/shm_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <latch>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace ckpt::pool {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

std::string UniquePath() {
  static std::atomic<int> counter{0};
  return "/dev/shm/ckpt-pool-test-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::unique_ptr<ShmPool> MakePool(uint64_t bytes, uint64_t alignment = 4096) {
  auto pool = ShmPool::Create({UniquePath(), bytes, alignment});
  INFO(pool.status().ToString());
  REQUIRE(pool.ok());
  return *std::move(pool);
}

// Runs `body` in a forked child; returns the child's wait status.
template <typename F>
int RunInChild(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Keep the expected FATAL line out of the test output, and take the
    // default abort: Catch2's own SIGABRT handler would report a failure.
    const int devnull = ::open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      ::dup2(devnull, STDOUT_FILENO);
      ::dup2(devnull, STDERR_FILENO);
    }
    ::signal(SIGABRT, SIG_DFL);
    ::alarm(30);  // a child that hangs dies with SIGALRM, failing the test
    body();
    ::_exit(0);
  }
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

TEST_CASE("Create maps a 0600 segment that a second mapping sees, removed on destruction",
          "[pool]") {
  const std::string path = UniquePath();
  const uint64_t bytes = 4 * kMiB;
  auto created = ShmPool::Create({path, bytes, 4096});
  INFO(created.status().ToString());
  REQUIRE(created.ok());
  std::unique_ptr<ShmPool> pool = *std::move(created);
  CHECK(pool->path() == path);
  CHECK(pool->capacity() == bytes);
  CHECK(pool->alignment() == 4096);

  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(static_cast<uint64_t>(st.st_size) == bytes);

  // A client's view: its own open + mmap of the same path.
  const int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  void* addr = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(addr != MAP_FAILED);
  char* client = static_cast<char*>(addr);

  std::memset(pool->base(), 'd', bytes);  // every page writable
  CHECK(client[0] == 'd');
  CHECK(client[bytes / 2] == 'd');
  CHECK(client[bytes - 1] == 'd');
  std::memcpy(client + 12345, "from client", 11);
  CHECK(std::memcmp(pool->base() + 12345, "from client", 11) == 0);

  pool.reset();
  CHECK_FALSE(Exists(path));
  // The client's mapping outlives the daemon's name for the segment.
  CHECK(client[0] == 'd');
  ::munmap(addr, bytes);
}

TEST_CASE("Create fails with RESOURCE_EXHAUSTED when /dev/shm cannot hold the pool", "[pool]") {
  struct statvfs vfs;
  REQUIRE(::statvfs("/dev/shm", &vfs) == 0);
  const uint64_t total = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  if (total == 0) {
    WARN("/dev/shm reports no size limit; skipping");
    return;
  }
  // More than the whole filesystem, not just more than its free space: tmpfs
  // rejects that before allocating a page, so the test never eats the RAM.
  const uint64_t bytes = (total + kGiB) / 4096 * 4096;
  const std::string path = UniquePath();
  auto pool = ShmPool::Create({path, bytes, 4096});
  REQUIRE_FALSE(pool.ok());
  INFO(pool.status().ToString());
  CHECK(pool.status().code() == absl::StatusCode::kResourceExhausted);
  const std::string message(pool.status().message());
  CHECK(message.find(path) != std::string::npos);
  CHECK(message.find("GiB") != std::string::npos);
  CHECK(message.find("No space left on device") != std::string::npos);
  CHECK(message.find("df -h") != std::string::npos);
  CHECK_FALSE(Exists(path));
}

TEST_CASE("Create refuses an existing file and leaves it alone", "[pool]") {
  const std::string path = UniquePath();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  auto pool = ShmPool::Create({path, kMiB, 4096});
  REQUIRE_FALSE(pool.ok());
  INFO(pool.status().ToString());
  CHECK(pool.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(std::string(pool.status().message()).find(path) != std::string::npos);
  CHECK(Exists(path));
  ::unlink(path.c_str());
}

TEST_CASE("Create validates its options", "[pool]") {
  auto invalid = [](uint64_t bytes, uint64_t alignment) {
    const std::string path = UniquePath();
    auto pool = ShmPool::Create({path, bytes, alignment});
    INFO("bytes " << bytes << " alignment " << alignment << ": " << pool.status().ToString());
    CHECK(pool.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_FALSE(Exists(path));
  };
  invalid(0, 4096);
  invalid(4095, 4096);
  invalid(kMiB, 0);
  invalid(kMiB, 2048);
  invalid(kMiB, 3 * 4096);
  auto no_path = ShmPool::Create({"", kMiB, 4096});
  CHECK(no_path.status().code() == absl::StatusCode::kInvalidArgument);

  SECTION("a size that is not a multiple of the alignment is rounded down") {
    auto pool = MakePool(kMiB + 5000, 64 * kKiB);
    CHECK(pool->capacity() == kMiB);
    struct stat st;
    REQUIRE(::stat(pool->path().c_str(), &st) == 0);
    CHECK(static_cast<uint64_t>(st.st_size) == kMiB);
  }
}

TEST_CASE("Allocate aligns offsets and rounds lengths up", "[pool]") {
  for (uint64_t alignment : {uint64_t{4096}, 64 * kKiB}) {
    auto pool = MakePool(64 * alignment, alignment);
    std::vector<Allocation> held;
    for (uint64_t bytes :
         {uint64_t{0}, uint64_t{1}, alignment - 1, alignment, alignment + 1, 3 * alignment}) {
      auto a = pool->Allocate(bytes, absl::InfinitePast());
      INFO("alignment " << alignment << " bytes " << bytes);
      REQUIRE(a.ok());
      CHECK(a->offset % alignment == 0);
      const uint64_t want =
          bytes == 0 ? alignment : (bytes + alignment - 1) / alignment * alignment;
      CHECK(a->length == want);
      CHECK(a->offset + a->length <= pool->capacity());
      held.push_back(*a);
    }
    PoolStats stats = pool->Stats();
    CHECK(stats.allocations == held.size());
    CHECK(stats.used == (1 + 1 + 1 + 1 + 2 + 3) * alignment);
    for (const Allocation& a : held) pool->Free(a);
    stats = pool->Stats();
    CHECK(stats.used == 0);
    CHECK(stats.allocations == 0);
  }
}

TEST_CASE("Random alloc/free matches a shadow model and never overlaps", "[pool]") {
  const uint64_t unit = 4096;
  const uint64_t units = 256;
  auto pool = MakePool(units * unit, unit);
  std::vector<bool> taken(units, false);
  std::vector<Allocation> held;
  std::mt19937_64 rng(42);
  auto longest_free_run = [&] {
    uint64_t best = 0, run = 0;
    for (bool t : taken) {
      run = t ? 0 : run + 1;
      best = std::max(best, run);
    }
    return best;
  };

  for (int step = 0; step < 20000; ++step) {
    if (held.empty() || rng() % 2 == 0) {
      const uint64_t bytes = rng() % (32 * unit);
      const uint64_t need = bytes == 0 ? 1 : (bytes + unit - 1) / unit;
      auto a = pool->Allocate(bytes, absl::InfinitePast());
      if (!a.ok()) {
        INFO("step " << step << ": " << a.status().ToString());
        REQUIRE(a.status().code() == absl::StatusCode::kResourceExhausted);
        // First fit over coalesced ranges fails only if nothing fits.
        REQUIRE(longest_free_run() < need);
        continue;
      }
      REQUIRE(a->length == need * unit);
      REQUIRE(a->offset % unit == 0);
      REQUIRE(a->offset + a->length <= pool->capacity());
      for (uint64_t u = a->offset / unit; u < (a->offset + a->length) / unit; ++u) {
        REQUIRE_FALSE(taken[u]);
        taken[u] = true;
      }
      held.push_back(*a);
    } else {
      const size_t i = rng() % held.size();
      const Allocation a = held[i];
      held[i] = held.back();
      held.pop_back();
      pool->Free(a);
      for (uint64_t u = a.offset / unit; u < (a.offset + a.length) / unit; ++u) taken[u] = false;
    }
    const PoolStats stats = pool->Stats();
    REQUIRE(stats.used ==
            static_cast<uint64_t>(std::count(taken.begin(), taken.end(), true)) * unit);
    REQUIRE(stats.allocations == held.size());
    REQUIRE(stats.used <= stats.capacity);
  }
  for (const Allocation& a : held) pool->Free(a);
  CHECK(pool->Stats().used == 0);
  // Everything coalesced back into one range.
  CHECK(pool->Allocate(pool->capacity(), absl::InfinitePast()).ok());
}

TEST_CASE("Freed fragments coalesce so the whole capacity can be allocated again", "[pool]") {
  const uint64_t unit = 4096;
  auto pool = MakePool(64 * unit, unit);
  std::vector<Allocation> held;
  for (int i = 0; i < 64; ++i) {
    auto a = pool->Allocate(unit, absl::InfinitePast());
    REQUIRE(a.ok());
    held.push_back(*a);
  }
  CHECK_FALSE(pool->Allocate(0, absl::InfinitePast()).ok());
  // Free the odd ones, then the even ones: each even free must merge on both sides.
  for (int i = 1; i < 64; i += 2) pool->Free(held[i]);
  CHECK_FALSE(pool->Allocate(2 * unit, absl::InfinitePast()).ok());
  for (int i = 0; i < 64; i += 2) pool->Free(held[i]);
  auto all = pool->Allocate(pool->capacity(), absl::InfinitePast());
  INFO(all.status().ToString());
  REQUIRE(all.ok());
  CHECK(all->offset == 0);
  CHECK(all->length == pool->capacity());
}

TEST_CASE("A request larger than the capacity fails at once", "[pool]") {
  auto pool = MakePool(kMiB);
  // An infinite deadline: if this waited, the test would hang.
  auto a = pool->Allocate(kMiB + 1, absl::InfiniteFuture());
  REQUIRE_FALSE(a.ok());
  INFO(a.status().ToString());
  CHECK(a.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(a.status().message()).find("exceeds the pool capacity") != std::string::npos);
  CHECK(pool->Allocate(~uint64_t{0}, absl::InfiniteFuture()).status().code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(pool->Stats().total_stall == absl::ZeroDuration());
  CHECK(pool->Stats().used == 0);
}

TEST_CASE("A full pool fails at the deadline, counts the stall, and does not over-commit",
          "[pool]") {
  auto pool = MakePool(kMiB);
  auto whole = pool->Allocate(kMiB, absl::InfinitePast());
  REQUIRE(whole.ok());

  const absl::Duration timeout = absl::Milliseconds(50);
  auto a = pool->Allocate(4096, absl::Now() + timeout);
  REQUIRE_FALSE(a.ok());
  INFO(a.status().ToString());
  CHECK(a.status().code() == absl::StatusCode::kResourceExhausted);
  const std::string message(a.status().message());
  CHECK(message.find(pool->path()) != std::string::npos);
  CHECK(message.find("4.0 KiB") != std::string::npos);             // requested
  CHECK(message.find("1.0 MiB of 1.0 MiB") != std::string::npos);  // used of capacity
  CHECK(message.find("after waiting") != std::string::npos);

  const PoolStats stats = pool->Stats();
  CHECK(stats.used == kMiB);
  CHECK(stats.allocations == 1);
  CHECK(stats.waiters == 0);
  // The wait ran to the deadline, which was set just before the call.
  CHECK(stats.total_stall >= timeout - absl::Milliseconds(5));

  // A deadline already passed: one try, no waiting.
  CHECK(pool->Allocate(0, absl::InfinitePast()).status().code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(pool->Stats().used == kMiB);
}

TEST_CASE("A waiting allocation succeeds once the holder frees", "[pool]") {
  auto pool = MakePool(kMiB);
  auto whole = pool->Allocate(kMiB, absl::InfinitePast());
  REQUIRE(whole.ok());

  absl::StatusOr<Allocation> result = absl::UnknownError("not run");
  std::thread waiter([&] { result = pool->Allocate(kMiB / 2, absl::Now() + absl::Seconds(60)); });
  while (pool->Stats().waiters != 1) std::this_thread::yield();
  CHECK(pool->Stats().used == kMiB);  // still waiting, nothing over-committed
  pool->Free(*whole);
  waiter.join();

  INFO(result.status().ToString());
  REQUIRE(result.ok());
  CHECK(result->length == kMiB / 2);
  const PoolStats stats = pool->Stats();
  CHECK(stats.waiters == 0);
  CHECK(stats.used == kMiB / 2);
  CHECK(stats.total_stall > absl::ZeroDuration());
}

TEST_CASE("Several waiters are all served when enough is freed", "[pool]") {
  auto pool = MakePool(kMiB);
  auto whole = pool->Allocate(kMiB, absl::InfinitePast());
  REQUIRE(whole.ok());

  constexpr int kWaiters = 4;
  std::vector<absl::StatusOr<Allocation>> results(kWaiters, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back(
        [&, i] { results[i] = pool->Allocate(kMiB / kWaiters, absl::Now() + absl::Seconds(60)); });
  }
  while (pool->Stats().waiters != kWaiters) std::this_thread::yield();
  pool->Free(*whole);
  for (std::thread& t : threads) t.join();
  for (const auto& r : results) {
    INFO(r.status().ToString());
    CHECK(r.ok());
  }
  CHECK(pool->Stats().used == kMiB);
  CHECK(pool->Stats().allocations == kWaiters);
}

TEST_CASE("Threads allocating, writing and freeing never overlap or over-commit", "[pool]") {
  const uint64_t capacity = 4 * kMiB;
  auto pool = MakePool(capacity);
  constexpr int kThreads = 6;
  constexpr int kIterations = 1500;

  // Catch2 assertions are not thread-safe: workers record, the main thread checks.
  std::mutex errors_mu;
  std::vector<std::string> errors;
  auto record = [&](std::string e) {
    std::lock_guard<std::mutex> lock(errors_mu);
    if (errors.size() < 10) errors.push_back(std::move(e));
  };
  std::atomic<bool> done{false};
  std::atomic<uint64_t> max_used{0};
  std::latch start(kThreads + 1);

  std::thread monitor([&] {
    start.arrive_and_wait();
    while (!done.load()) {
      const PoolStats s = pool->Stats();
      uint64_t seen = max_used.load();
      while (s.used > seen && !max_used.compare_exchange_weak(seen, s.used)) {
      }
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      struct Held {
        Allocation a;
        uint64_t seq;
      };
      std::vector<Held> held;
      auto fill = [&](const Held& h) {
        auto* words = reinterpret_cast<uint64_t*>(pool->base() + h.a.offset);
        for (uint64_t i = 0; i < h.a.length / 8; ++i)
          words[i] = (uint64_t(t + 1) << 48) ^ h.seq ^ i;
      };
      auto verify_and_free = [&](size_t k) {
        const Held h = held[k];
        held[k] = held.back();
        held.pop_back();
        const auto* words = reinterpret_cast<const uint64_t*>(pool->base() + h.a.offset);
        for (uint64_t i = 0; i < h.a.length / 8; ++i) {
          if (words[i] != ((uint64_t(t + 1) << 48) ^ h.seq ^ i)) {
            record("thread " + std::to_string(t) + ": allocation at " + std::to_string(h.a.offset) +
                   " overwritten at word " + std::to_string(i));
            break;
          }
        }
        pool->Free(h.a);
      };
      start.arrive_and_wait();
      for (int it = 0; it < kIterations; ++it) {
        const uint64_t bytes = rng() % (capacity / 4);
        // Holding nothing, a thread may wait long: the others only wait
        // briefly while holding, so everything is freed eventually. Holding
        // something, it waits briefly, then frees to break any cycle.
        const absl::Time deadline =
            held.empty() ? absl::Now() + absl::Seconds(20) : absl::Now() + absl::Microseconds(200);
        auto a = pool->Allocate(bytes, deadline);
        if (a.ok()) {
          held.push_back({*a, static_cast<uint64_t>(it)});
          fill(held.back());
        } else if (held.empty()) {
          record("thread " + std::to_string(t) +
                 " holding nothing failed: " + a.status().ToString());
        } else if (a.status().code() != absl::StatusCode::kResourceExhausted) {
          record("unexpected status " + a.status().ToString());
        }
        if (!held.empty() && (held.size() >= 3 || !a.ok() || rng() % 2 == 0)) {
          verify_and_free(rng() % held.size());
        }
      }
      while (!held.empty()) verify_and_free(0);
    });
  }
  for (std::thread& w : workers) w.join();
  done = true;
  monitor.join();

  for (const std::string& e : errors) FAIL_CHECK(e);
  CHECK(errors.empty());
  CHECK(max_used.load() <= capacity);
  CHECK(max_used.load() > 0);
  const PoolStats stats = pool->Stats();
  CHECK(stats.used == 0);
  CHECK(stats.allocations == 0);
  CHECK(stats.waiters == 0);
  CHECK(pool->Allocate(capacity, absl::InfinitePast()).ok());
}

TEST_CASE("Freeing something that is not a live allocation aborts", "[pool]") {
  auto pool = MakePool(kMiB);
  auto a = pool->Allocate(8192, absl::InfinitePast());
  REQUIRE(a.ok());
  auto aborted = [](int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT; };

  SECTION("double free") {
    const Allocation copy = *a;
    pool->Free(copy);
    CHECK(aborted(RunInChild([&] { pool->Free(copy); })));
  }
  SECTION("wrong length") {
    CHECK(aborted(RunInChild([&] { pool->Free({a->offset, 4096}); })));
    pool->Free(*a);
  }
  SECTION("offset never returned") {
    CHECK(aborted(RunInChild([&] { pool->Free({a->offset + 4096, 4096}); })));
    pool->Free(*a);
  }
  SECTION("a valid free in the child does not abort") {
    const int status = RunInChild([&] { pool->Free(*a); });
    CHECK(WIFEXITED(status));
    pool->Free(*a);
  }
  CHECK(pool->Stats().used == 0);
}

}  // namespace
}  // namespace ckpt::pool
