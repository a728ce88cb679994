#include "daemon/pool/shm_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <latch>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/pool/huge_pages.h"
#include "tests/catch.h"

namespace ckpt::pool {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

// Entries of /dev/shm: the pool must add none (it is memfds, not a file).
size_t ShmEntries() {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    (void)entry;
    ++n;
  }
  return n;
}

// A rank's view of one segment: its descriptor mapped on its own.
struct ClientView {
  ClientView(int fd, uint64_t length) : length(length) {
    void* addr = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(addr != MAP_FAILED);
    bytes = static_cast<char*>(addr);
  }
  ~ClientView() { ::munmap(bytes, length); }
  ClientView(const ClientView&) = delete;
  ClientView& operator=(const ClientView&) = delete;
  char* bytes = nullptr;
  uint64_t length = 0;
};

std::unique_ptr<ShmPool> MakePool(uint64_t bytes, uint64_t alignment = 4096,
                                  uint64_t segment_bytes = 0) {
  PoolOptions options;
  options.bytes = bytes;
  options.alignment = alignment;
  options.segment_bytes = segment_bytes;
  auto pool = ShmPool::Create(options);
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

TEST_CASE("Segments are sealed memfds that a rank's own mapping sees; no file appears", "[pool]") {
  const size_t before = ShmEntries();
  auto pool = MakePool(4 * kMiB, 4096, kMiB);
  CHECK(pool->capacity() == 4 * kMiB);
  CHECK(pool->segment_bytes() == kMiB);
  CHECK(pool->Stats().segments == 4);
  CHECK(ShmEntries() == before);

  auto a = pool->Allocate(100 * kKiB, absl::InfinitePast(), {"a"});
  REQUIRE(a.ok());
  CHECK(a->epoch > 0);
  absl::StatusOr<OwnerSegments> table = pool->SegmentsOf("a");
  REQUIRE(table.ok());
  CHECK(table->epoch == a->epoch);
  REQUIRE(table->ranges.size() == 1);
  REQUIRE(table->fds.size() == 1);
  CHECK(table->ranges[0].offset <= a->offset);
  CHECK(a->offset + a->length <= table->ranges[0].offset + table->ranges[0].length);

  ClientView view(table->fds[0].get(), table->ranges[0].length);
  const uint64_t at = a->offset - table->ranges[0].offset;
  std::memset(pool->base() + a->offset, 'd', a->length);
  CHECK(view.bytes[at] == 'd');
  CHECK(view.bytes[at + a->length - 1] == 'd');
  std::memcpy(view.bytes + at + 5, "from client", 11);
  CHECK(std::memcmp(pool->base() + a->offset + 5, "from client", 11) == 0);

  // A rank cannot shrink or grow its segment under the daemon (a shrink
  // would make the daemon's next touch SIGBUS), nor add seals.
  const int fd = table->fds[0].get();
  CHECK(::ftruncate(fd, 0) != 0);
  CHECK(::ftruncate(fd, static_cast<off_t>(2 * kMiB)) != 0);
  const int seals = ::fcntl(fd, F_GET_SEALS);
  CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
        (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));

  // Another owner holds nothing, and sees nothing.
  absl::StatusOr<OwnerSegments> other = pool->SegmentsOf("b");
  REQUIRE(other.ok());
  CHECK(other->ranges.empty());
  CHECK(other->epoch == 0);
  pool->Free(*a);
}

TEST_CASE("The pool lies on huge page boundaries and gets huge pages where the kernel allows",
          "[pool]") {
  // "never" (the kernel's default) becomes "advise" for the test, as root.
  ScopedShmemHugeAdvise setting;
  const std::string now = ShmemHugeSetting();
  const bool allowed = now == "advise" || now == "within_size" || now == "always" || now == "force";
  const uint64_t before = ShmemHugePageBytes(::getpid());
  constexpr uint64_t kSegment = 8 * kMiB;
  auto pool = MakePool(2 * kSegment, 4096, kSegment);
  CHECK(reinterpret_cast<uintptr_t>(pool->base()) % (2 * kMiB) == 0);
  if (!allowed) {
    WARN("shmem_enabled is " << ShmemHugeSetting() << " and this test is not root: only the "
                             << "alignment was checked");
    return;
  }
  // Direct I/O from these pages goes to the disk in 4 MiB requests.
  CHECK(ShmemHugePageBytes(::getpid()) - before == 2 * kSegment);
  // A segment renewed for another owner is in huge pages too.
  auto a = pool->Allocate(2 * kSegment, absl::InfinitePast(), {"a"});
  REQUIRE(a.ok());
  pool->Free(*a);
  auto b = pool->Allocate(kSegment, absl::InfinitePast(), {"b"});
  REQUIRE(b.ok());
  CHECK(pool->Stats().segment_renewals == 1);
  CHECK(ShmemHugePageBytes(::getpid()) - before == 2 * kSegment);
  pool->Free(*b);
}

TEST_CASE("Create refuses a pool larger than the memory available", "[pool]") {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  uint64_t total = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemTotal:") total = kib * 1024;
  }
  REQUIRE(total > 0);
  PoolOptions options;
  options.bytes = (total + kGiB) / 4096 * 4096;
  auto pool = ShmPool::Create(options);
  REQUIRE_FALSE(pool.ok());
  INFO(pool.status().ToString());
  CHECK(pool.status().code() == absl::StatusCode::kResourceExhausted);
  const std::string message(pool.status().message());
  CHECK(message.find("GiB") != std::string::npos);
  CHECK(message.find("MemAvailable") != std::string::npos);
  CHECK(message.find("--pool_bytes") != std::string::npos);
}

TEST_CASE("Create validates its options", "[pool]") {
  auto invalid = [](uint64_t bytes, uint64_t alignment, uint64_t segment_bytes = 0) {
    PoolOptions options;
    options.bytes = bytes;
    options.alignment = alignment;
    options.segment_bytes = segment_bytes;
    auto pool = ShmPool::Create(options);
    INFO("bytes " << bytes << " alignment " << alignment << ": " << pool.status().ToString());
    CHECK(pool.status().code() == absl::StatusCode::kInvalidArgument);
  };
  invalid(0, 4096);
  invalid(4095, 4096);
  invalid(kMiB, 0);
  invalid(kMiB, 2048);
  invalid(kMiB, 3 * 4096);
  invalid(64 * kMiB, 4096, 4096);        // 16384 segments: too many descriptors
  invalid(4 * kMiB + 4096, 4096, 4096);  // 1025 segments, the last a short one

  SECTION("a size that is not a multiple of the alignment is rounded down") {
    auto pool = MakePool(kMiB + 5000, 64 * kKiB);
    CHECK(pool->capacity() == kMiB);
  }
  SECTION("the default segment size gives 16 to 256 segments") {
    CHECK(DefaultSegmentBytes(kMiB, 4096) == 64 * kKiB);
    CHECK(DefaultSegmentBytes(2 * kGiB, 4096) == 64 * kMiB);
    CHECK(DefaultSegmentBytes(64 * kGiB, 4096) == 256 * kMiB);
    CHECK(DefaultSegmentBytes(16 * kKiB, 64 * kKiB) == 64 * kKiB);
  }
}

TEST_CASE("Owners never share a segment; one passes to another owner only with fresh memory",
          "[pool]") {
  constexpr uint64_t kSegment = 64 * kKiB;
  auto pool = MakePool(8 * kSegment, 4096, kSegment);
  // "a" takes the whole pool: every segment is its, and its ranks map them.
  auto whole = pool->Allocate(8 * kSegment, absl::InfinitePast(), {"a"});
  REQUIRE(whole.ok());
  absl::StatusOr<OwnerSegments> a_table = pool->SegmentsOf("a");
  REQUIRE(a_table.ok());
  REQUIRE(a_table->ranges.size() == 8);
  std::vector<std::unique_ptr<ClientView>> a_views;
  for (size_t i = 0; i < 8; ++i) {
    a_views.push_back(std::make_unique<ClientView>(a_table->fds[i].get(), kSegment));
    std::memset(a_views.back()->bytes, 'A', kSegment);
  }
  const uint64_t a_epoch = a_table->epoch;
  pool->Free(*whole);
  CHECK(pool->Stats().segment_renewals == 0);

  // "b" needs room: only "a"'s (free) segments are left, so one is renewed.
  auto b = pool->Allocate(kSegment / 2, absl::InfinitePast(), {"b"});
  REQUIRE(b.ok());
  CHECK(pool->Stats().segment_renewals == 1);
  absl::StatusOr<OwnerSegments> b_table = pool->SegmentsOf("b");
  REQUIRE(b_table.ok());
  REQUIRE(b_table->ranges.size() == 1);
  const uint64_t taken = b_table->ranges[0].offset;
  const size_t taken_index = static_cast<size_t>(taken / kSegment);
  CHECK(b_table->ranges[0].generation != a_table->ranges[taken_index].generation);
  CHECK(b->epoch == b_table->epoch);
  std::memset(pool->base() + b->offset, 'B', b->length);
  // "a"'s old mapping of that segment shows neither its old bytes nor "b"'s.
  const char* stale = a_views[taken_index]->bytes;
  for (uint64_t i = 0; i < kSegment; i += 512) {
    INFO("byte " << i << " of the renewed segment as the old owner sees it");
    REQUIRE(stale[i] == 0);
  }
  // Its other segments are untouched, and its table lost only that one.
  CHECK(a_views[(taken_index + 1) % 8]->bytes[100] == 'A');
  absl::StatusOr<OwnerSegments> a_after = pool->SegmentsOf("a");
  REQUIRE(a_after.ok());
  CHECK(a_after->ranges.size() == 7);
  CHECK(a_after->epoch == a_epoch);
  for (const segments::WireSegment& r : a_after->ranges) CHECK(r.offset != taken);

  // "a" again: it reuses its own segments, no renewal, same epoch.
  auto again = pool->Allocate(kSegment, absl::InfinitePast(), {"a"});
  REQUIRE(again.ok());
  CHECK(again->epoch == a_epoch);
  CHECK(pool->Stats().segment_renewals == 1);
  CHECK((again->offset + again->length <= taken || again->offset >= taken + kSegment));
  // "b" again: room left in its own segment, so nothing changes hands.
  auto b2 = pool->Allocate(kSegment / 2, absl::InfinitePast(), {"b"});
  REQUIRE(b2.ok());
  CHECK(b2->offset >= taken);
  CHECK(b2->offset + b2->length <= taken + kSegment);
  CHECK(b2->epoch == b->epoch);
  pool->Free(*again);
  pool->Free(*b);
  pool->Free(*b2);
}

TEST_CASE("Adopt gives an attaching owner never-used segments up to its share, no one else's",
          "[pool]") {
  constexpr uint64_t kSegment = 64 * kKiB;
  PoolOptions options;
  options.bytes = 8 * kSegment;
  options.segment_bytes = kSegment;
  options.owner_share = 0.25;
  auto created = ShmPool::Create(options);
  REQUIRE(created.ok());
  std::unique_ptr<ShmPool> pool = *std::move(created);
  pool->Adopt("a");
  absl::StatusOr<OwnerSegments> a = pool->SegmentsOf("a");
  REQUIRE(a.ok());
  CHECK(a->ranges.size() == 2);  // a quarter of the pool
  pool->Adopt("a");              // again: it holds its share already
  CHECK(pool->SegmentsOf("a")->ranges.size() == 2);
  CHECK(pool->SegmentsOf("a")->epoch == a->epoch);
  // Allocations inside what it adopted change nothing its ranks map.
  auto in_share = pool->Allocate(2 * kSegment, absl::InfinitePast(), {"a"});
  REQUIRE(in_share.ok());
  CHECK(in_share->epoch == a->epoch);
  pool->Adopt("b");
  absl::StatusOr<OwnerSegments> b = pool->SegmentsOf("b");
  REQUIRE(b.ok());
  CHECK(b->ranges.size() == 2);
  for (const auto& r : b->ranges) {
    for (const auto& ours : a->ranges) CHECK(r.offset != ours.offset);
  }
  CHECK(pool->Stats().segment_renewals == 0);
  pool->Free(*in_share);

  // Alone with no share set, an owner adopts the whole pool.
  auto whole = MakePool(8 * kSegment, 4096, kSegment);
  whole->Adopt("only");
  CHECK(whole->SegmentsOf("only")->ranges.size() == 8);
  whole->Adopt("late");  // nothing left unused: it takes segments when it allocates
  CHECK(whole->SegmentsOf("late")->ranges.empty());
}

TEST_CASE("Random allocations of several owners never put two owners in one segment", "[pool]") {
  constexpr uint64_t kSegment = 64 * kKiB;
  auto pool = MakePool(32 * kSegment, 4096, kSegment);
  std::mt19937_64 rng(7);
  struct Held {
    Allocation allocation;
    std::string owner;
  };
  std::vector<Held> held;
  const std::vector<std::string> owners = {"x", "y", "z"};
  for (int step = 0; step < 3000; ++step) {
    if (!held.empty() && (rng() % 2 == 0 || held.size() > 20)) {
      const size_t i = rng() % held.size();
      pool->Free(held[i].allocation);
      held.erase(held.begin() + static_cast<long>(i));
      continue;
    }
    const std::string& owner = owners[rng() % owners.size()];
    const uint64_t bytes = 1 + rng() % (3 * kSegment);
    auto a = pool->Allocate(bytes, absl::InfinitePast(), {owner});
    if (!a.ok()) continue;  // no room in segments it may use: fine, never wrong
    held.push_back({*a, owner});
    std::map<uint64_t, std::string> segment_owner;
    for (const Held& h : held) {
      for (uint64_t s = h.allocation.offset / kSegment;
           s <= (h.allocation.offset + h.allocation.length - 1) / kSegment; ++s) {
        auto [it, inserted] = segment_owner.emplace(s, h.owner);
        INFO("segment " << s << " step " << step);
        REQUIRE((inserted || it->second == h.owner));
      }
    }
    // What each owner's ranks would map covers each of its allocations.
    absl::StatusOr<OwnerSegments> table = pool->SegmentsOf(owner);
    REQUIRE(table.ok());
    CHECK(table->epoch >= a->epoch);
    for (uint64_t s = a->offset / kSegment; s <= (a->offset + a->length - 1) / kSegment; ++s) {
      bool found = false;
      for (const segments::WireSegment& r : table->ranges) found |= r.offset == s * kSegment;
      CHECK(found);
    }
  }
  for (const Held& h : held) pool->Free(h.allocation);
  CHECK(pool->Stats().used == 0);
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
  CHECK(message.find(pool->name()) != std::string::npos);
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
