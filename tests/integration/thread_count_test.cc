// "One worker per client, not a thread per save": 100,000 saves of a tiny
// state through one ckpt::Client against a real ckptd keep the thread count
// of the client process and of the daemon flat.
//
// The daemon stores into its in-memory backend (--storage_backend=memory),
// so the run measures threads, not a disk. Nothing deletes checkpoints (the
// daemon has no retention or delete yet, and a committed step cannot be
// saved again), so the 100,000 steps stay in the daemon's memory: about
// 6 KiB each, 600 MB in all. Saves are asynchronous: up to kInFlight are queued
// on the client's worker at once and the oldest is waited for, as a trainer
// that saves every step and checks durability later would.
//
// Tagged [thread_count]; its own binary and ctest entry, so it runs alone:
//   ctest -R thread_count_test    or    tests/integration/thread_count_test
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ckpt/client.h"
#include "tests/catch.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

constexpr int64_t kWarmUpSaves = 1'000;
constexpr int64_t kSaves = 100'000;
constexpr size_t kInFlight = 16;

}  // namespace

TEST_CASE("100,000 saves through one client keep the thread counts flat",
          "[integration][thread_count]") {
  TestDaemon d;
  REQUIRE(d.Start({"--storage_backend=memory", "--writer_threads=1"}).ok());

  ClientOptions options;
  options.socket_path = d.socket();
  options.job = "flat";
  options.copy_threads = 1;
  auto client = Client::Attach(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());

  // The tiny state: a step counter, one 0-d tensor (4 KiB in the daemon's
  // memory per step once padded, with its manifest about 6 KiB).
  int64_t counter = 0;
  HostTensor tensor;
  tensor.fqn = "step";
  tensor.dtype = DType::kInt64;
  tensor.data = &counter;

  std::deque<std::shared_ptr<SaveHandle>> in_flight;
  auto wait_oldest = [&] {
    const absl::Status s = in_flight.front()->WaitPersisted();
    INFO("step " << in_flight.front()->step() << ": " << s.ToString());
    REQUIRE(s.ok());
    in_flight.pop_front();
  };
  auto run = [&](int64_t first, int64_t end) {
    for (int64_t step = first; step < end; ++step) {
      if (in_flight.size() == kInFlight) wait_oldest();
      auto handle = (*client)->Save(step, {tensor}, {});
      INFO("step " << step << ": " << handle.status().ToString());
      REQUIRE(handle.ok());
      in_flight.push_back(std::move(*handle));
    }
    while (!in_flight.empty()) wait_oldest();
  };

  const absl::Time start = absl::Now();
  run(0, kWarmUpSaves);
  const absl::Duration warm_up = absl::Now() - start;
  const int client_after_warm_up = ThreadCount(getpid());
  const int daemon_after_warm_up = ThreadCount(d.pid());
  run(kWarmUpSaves, kSaves);
  const absl::Duration took = absl::Now() - start;
  const int client_after_all = ThreadCount(getpid());
  const int daemon_after_all = ThreadCount(d.pid());

  INFO(kSaves << " saves in " << absl::FormatDuration(took) << " ("
              << absl::FormatDuration(took / kSaves) << " each; the first " << kWarmUpSaves
              << " in " << absl::FormatDuration(warm_up) << "); client threads "
              << client_after_warm_up << " -> " << client_after_all << ", daemon threads "
              << daemon_after_warm_up << " -> " << daemon_after_all << ", daemon peak RSS "
              << ProcStatusKb(d.pid(), "VmHWM") << " kB");
  REQUIRE(client_after_warm_up > 0);
  REQUIRE(daemon_after_warm_up > 0);
  // Both counts include gRPC's own threads, which are not ours to pin: the
  // daemon's sync server runs one handler thread per call in progress (here
  // at most two: the worker's call and the persister's WaitSave) plus its
  // pollers, and gRPC's executor and timer threads on both sides start on
  // demand. That may move a count by a thread or two between the two
  // measurements, so 2 more are allowed; a thread per save (99,000 more) or
  // per batch of saves is not.
  CHECK(client_after_all <= client_after_warm_up + 2);
  CHECK(daemon_after_all <= daemon_after_warm_up + 2);
  REQUIRE(d.Running());
  // Every save was a real one.
  v1::GetStatusResponse status;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  REQUIRE(d.Stub()->GetStatus(&context, v1::GetStatusRequest(), &status).ok());
  CHECK(status.checkpoints_committed() == static_cast<uint64_t>(kSaves));
  CHECK(status.pool_used_bytes() == 0);
  // The rate, for the record (the machine's load decides most of it).
  WARN(kSaves << " saves in " << absl::FormatDuration(took) << " (the first " << kWarmUpSaves
              << " in " << absl::FormatDuration(warm_up) << "); client threads "
              << client_after_warm_up << " -> " << client_after_all << ", daemon threads "
              << daemon_after_warm_up << " -> " << daemon_after_all << ", daemon peak RSS "
              << ProcStatusKb(d.pid(), "VmHWM") << " kB");
}

}  // namespace ckpt::testing
