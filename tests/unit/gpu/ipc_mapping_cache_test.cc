#include "gpu/ipc_mapping_cache.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gpu/device_runtime.h"
#include "gpu/ipc_mapping.h"
#include "tests/catch.h"

namespace ckpt::gpu {
namespace {

// Counts opens and closes; a handle starting with "bad" fails to open. The
// mapping's "device pointer" is a distinct fake address per open, never
// dereferenced.
class CountingRuntime : public DeviceRuntime {
 public:
  std::string Name() const override { return "counting"; }
  bool HasDevice() const override { return true; }
  int DeviceCount() const override { return 2; }
  std::string Describe() const override { return "counting fake"; }
  absl::Status RegisterHostMemory(void*, size_t) override { return absl::OkStatus(); }
  absl::Status UnregisterHostMemory(void*) override { return absl::OkStatus(); }
  absl::StatusOr<IpcExport> ExportIpcHandle(const void*) override {
    return absl::UnimplementedError("fake");
  }
  absl::StatusOr<IpcEvent> RecordIpcEvent(void*) override {
    return absl::UnimplementedError("fake");
  }
  absl::Status SynchronizeStream(void*) override { return absl::UnimplementedError("fake"); }
  absl::Status WaitIpcEvent(const std::string&, int) override {
    return absl::UnimplementedError("fake");
  }
  absl::Status CopyDeviceToHost(const void*, void*, uint64_t, uint64_t,
                                const std::function<void(uint64_t, uint64_t)>&) override {
    return absl::UnimplementedError("fake");
  }
  absl::Status CopyHostToDevice(const void*, void*, uint64_t) override {
    return absl::UnimplementedError("fake");
  }

  absl::StatusOr<std::unique_ptr<IpcMapping>> OpenIpcHandle(const std::string& handle, int device,
                                                            uint64_t allocation_bytes) override {
    if (absl::StartsWith(handle, "bad")) {
      return absl::InvalidArgumentError(absl::StrCat("cannot open ", handle));
    }
    const uintptr_t address = 0x1000 * (opens_.fetch_add(1) + 1);
    {
      absl::MutexLock lock(&mu_);
      open_.insert(address);
    }
    return std::make_unique<IpcMapping>(reinterpret_cast<void*>(address), allocation_bytes, device,
                                        [this](void* ptr, int) {
                                          closes_.fetch_add(1);
                                          absl::MutexLock lock(&mu_);
                                          open_.erase(reinterpret_cast<uintptr_t>(ptr));
                                        });
  }

  int opens() const { return opens_.load(); }
  int closes() const { return closes_.load(); }
  bool IsOpen(const void* ptr) const {
    absl::MutexLock lock(&mu_);
    return open_.count(reinterpret_cast<uintptr_t>(ptr)) > 0;
  }

 private:
  std::atomic<int> opens_{0};
  std::atomic<int> closes_{0};
  mutable absl::Mutex mu_;
  std::set<uintptr_t> open_ ABSL_GUARDED_BY(mu_);
};

constexpr uint64_t kBytes = 64 << 20;

TEST_CASE("IpcMapping closes once, and moves carry the duty", "[gpu_runtime]") {
  int closes = 0;
  auto closer = [&](void* ptr, int device) {
    CHECK(ptr == reinterpret_cast<void*>(0x1000));
    CHECK(device == 1);
    ++closes;
  };
  {
    IpcMapping a(reinterpret_cast<void*>(0x1000), kBytes, 1, closer);
    IpcMapping b(std::move(a));
    CHECK(a.device_ptr() == nullptr);
    CHECK(b.device_ptr() == reinterpret_cast<void*>(0x1000));
    CHECK(b.bytes() == kBytes);
    CHECK(b.device() == 1);
    IpcMapping c(nullptr, 0, 0, nullptr);
    c = std::move(b);
    CHECK(closes == 0);
  }
  CHECK(closes == 1);
}

TEST_CASE("IpcMappingCache reuses a mapping per owner and handle", "[gpu_runtime]") {
  CountingRuntime runtime;
  IpcMappingCache cache(&runtime);

  absl::StatusOr<std::shared_ptr<IpcMapping>> first = cache.Get("rank0", "h1", 0, kBytes);
  REQUIRE(first.ok());
  CHECK((*first)->bytes() == kBytes);
  CHECK((*first)->device() == 0);
  absl::StatusOr<std::shared_ptr<IpcMapping>> again = cache.Get("rank0", "h1", 0, kBytes);
  REQUIRE(again.ok());
  CHECK(again->get() == first->get());
  CHECK(runtime.opens() == 1);
  CHECK(cache.size() == 1);

  REQUIRE(cache.Get("rank0", "h2", 0, kBytes).ok());
  REQUIRE(cache.Get("rank1", "h1", 1, kBytes).ok());
  CHECK(runtime.opens() == 3);
  CHECK(cache.size() == 3);
  CHECK(runtime.closes() == 0);
}

TEST_CASE("IpcMappingCache refuses a cached handle with other geometry", "[gpu_runtime]") {
  CountingRuntime runtime;
  IpcMappingCache cache(&runtime);
  REQUIRE(cache.Get("rank0", "h1", 0, kBytes).ok());

  absl::Status other_device = cache.Get("rank0", "h1", 1, kBytes).status();
  INFO(other_device.ToString());
  CHECK(other_device.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(other_device.message(), "rank0"));
  CHECK(cache.Get("rank0", "h1", 0, kBytes / 2).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(runtime.opens() == 1);
  CHECK(cache.size() == 1);
}

TEST_CASE("IpcMappingCache caches no failed open and names the owner", "[gpu_runtime]") {
  CountingRuntime runtime;
  IpcMappingCache cache(&runtime);
  absl::Status failed = cache.Get("rank3", "bad-handle", 0, kBytes).status();
  INFO(failed.ToString());
  CHECK(failed.code() == absl::StatusCode::kInvalidArgument);
  CHECK(failed.message() == "IPC mapping for rank3: cannot open bad-handle");
  CHECK(cache.size() == 0);
  CHECK(runtime.opens() == 0);
}

TEST_CASE("IpcMappingCache::ReleaseOwner closes exactly that owner's mappings", "[gpu_runtime]") {
  CountingRuntime runtime;
  IpcMappingCache cache(&runtime);
  std::vector<void*> rank0;
  for (const char* handle : {"a", "b", "c"}) {
    absl::StatusOr<std::shared_ptr<IpcMapping>> got = cache.Get("rank0", handle, 0, kBytes);
    REQUIRE(got.ok());
    rank0.push_back((*got)->device_ptr());
  }
  absl::StatusOr<std::shared_ptr<IpcMapping>> kept = cache.Get("rank1", "a", 1, kBytes);
  REQUIRE(kept.ok());
  void* rank1_ptr = (*kept)->device_ptr();
  kept->reset();
  // A copy in flight holds one of rank0's mappings across the release.
  absl::StatusOr<std::shared_ptr<IpcMapping>> in_flight = cache.Get("rank0", "b", 0, kBytes);
  REQUIRE(in_flight.ok());
  REQUIRE(cache.size() == 4);

  cache.ReleaseOwner("rank0");
  CHECK(cache.size() == 1);
  CHECK(runtime.closes() == 2);
  CHECK_FALSE(runtime.IsOpen(rank0[0]));
  CHECK(runtime.IsOpen(rank0[1]));
  CHECK_FALSE(runtime.IsOpen(rank0[2]));
  CHECK(runtime.IsOpen(rank1_ptr));
  in_flight->reset();
  CHECK(runtime.closes() == 3);
  CHECK_FALSE(runtime.IsOpen(rank0[1]));

  // rank1 is untouched and still served from the cache.
  absl::StatusOr<std::shared_ptr<IpcMapping>> rank1 = cache.Get("rank1", "a", 1, kBytes);
  REQUIRE(rank1.ok());
  CHECK((*rank1)->device_ptr() == rank1_ptr);
  CHECK(runtime.opens() == 4);

  cache.ReleaseOwner("nobody");
  cache.ReleaseOwner("rank0");
  CHECK(cache.size() == 1);
  CHECK(runtime.closes() == 3);

  // A re-attached rank0 opens afresh.
  REQUIRE(cache.Get("rank0", "a", 0, kBytes).ok());
  CHECK(runtime.opens() == 5);
}

TEST_CASE("IpcMappingCache is safe from many threads", "[gpu_runtime]") {
  constexpr int kThreads = 8;
  constexpr int kOwners = 4;
  constexpr int kHandles = 8;
  constexpr int kRounds = 2000;
  CountingRuntime runtime;
  {
    IpcMappingCache cache(&runtime);
    std::atomic<int> failures{0};
    auto run = [&](bool release) {
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < kRounds; ++i) {
            const int key = (i * kThreads + t) % (kOwners * kHandles);
            const int owner = key % kOwners;
            const int handle = key / kOwners;
            absl::StatusOr<std::shared_ptr<IpcMapping>> got =
                cache.Get(absl::StrCat("rank", owner), absl::StrCat("handle-", owner, "-", handle),
                          owner % 2, kBytes);
            if (!got.ok() || (*got)->device() != owner % 2 || (*got)->bytes() != kBytes ||
                !runtime.IsOpen((*got)->device_ptr())) {
              failures.fetch_add(1);
            }
            if (release && t == 0 && i % 50 == 0) {
              cache.ReleaseOwner(absl::StrCat("rank", i % kOwners));
            }
            (void)cache.size();
          }
        });
      }
      for (std::thread& thread : threads) thread.join();
    };

    // Racing first uses open each key exactly once.
    run(/*release=*/false);
    CHECK(failures.load() == 0);
    CHECK(runtime.opens() == kOwners * kHandles);
    CHECK(cache.size() == kOwners * kHandles);
    CHECK(runtime.closes() == 0);

    // With releases racing the gets, nothing handed out is ever closed under
    // its holder, and every open is eventually closed.
    run(/*release=*/true);
    CHECK(failures.load() == 0);
    CHECK(runtime.opens() > kOwners * kHandles);
    for (int owner = 0; owner < kOwners; ++owner) cache.ReleaseOwner(absl::StrCat("rank", owner));
    CHECK(cache.size() == 0);
    CHECK(runtime.closes() == runtime.opens());
  }
  CHECK(runtime.closes() == runtime.opens());
}

}  // namespace
}  // namespace ckpt::gpu
