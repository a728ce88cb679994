// The coordinator's gathering of a load whose world spans hosts
// (Coordinator::PlanSpanningLoad, load_gathering.h): each host sends its
// plan from its own thread, as each node's RPC does. A rank asked on two
// hosts, ranks that never come, or a lost host fail the load on every host
// waiting, naming what went wrong; the next load of the step gathers
// afresh.
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "daemon/coordinator/coordinator.h"
#include "daemon/storage/backend_factory.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

constexpr char kRoot[] = "/ckpt";

// A host's load of `ranks` of a world of 3, job "job", the latest step.
v1::NodeLoadPlan LoadPlan(const std::string& host, const std::vector<int>& ranks) {
  v1::NodeLoadPlan node;
  node.mutable_host()->set_host(host);
  node.set_job("job");
  node.set_step(-1);
  node.set_world_size(3);
  for (int r : ranks) node.add_ranks()->set_rank(r);
  return node;
}

TEST_CASE("load gathering: a rank asked on two hosts fails the load on both", "[load_gathering]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, {});
  auto h0 = std::async(std::launch::async, [&] {
    return coord.PlanSpanningLoad(LoadPlan("h0", {0, 1}));
  });
  // h1 may come first: then it is h0 that asks for rank 1 again.
  const absl::Status h1 = coord.PlanSpanningLoad(LoadPlan("h1", {1})).status();
  const absl::Status first = h0.get().status();
  for (const absl::Status& s : {h1, first}) {
    INFO(s.ToString());
    CHECK(absl::IsInvalidArgument(s));
    CHECK((s.message() == "rank 1 asked to load on both host h0 and host h1" ||
           s.message() == "rank 1 asked to load on both host h1 and host h0"));
  }
  CHECK(coord.loads_gathering() == 0);
}

TEST_CASE("load gathering: a rank twice in one host's plan names that host twice",
          "[load_gathering]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, {});
  CKPT_REQUIRE_ERROR(coord.PlanSpanningLoad(LoadPlan("h0", {2, 2})),
                     absl::StatusCode::kInvalidArgument,
                     "rank 2 asked to load on both host h0 and host h0");
  CKPT_REQUIRE_ERROR(coord.PlanSpanningLoad(LoadPlan("h0", {0, 3})),
                     absl::StatusCode::kInvalidArgument, "host h0 sent rank 3 of a world of 3");
  CHECK(coord.loads_gathering() == 0);
}

TEST_CASE("load gathering: ranks that never come fail the load, named", "[load_gathering]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, {}, {},
                    RendezvousOptions{.plan_timeout = absl::Milliseconds(300)});
  CKPT_REQUIRE_ERROR(coord.PlanSpanningLoad(LoadPlan("h0", {0, 2})),
                     absl::StatusCode::kDeadlineExceeded,
                     "ranks [1] (1 of 3) never reached the coordinator within 300ms");
  CHECK(coord.loads_gathering() == 0);
}

TEST_CASE("load gathering: a lost host fails the load and loads nothing until it registers",
          "[load_gathering]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, {});
  auto h0 =
      std::async(std::launch::async, [&] { return coord.PlanSpanningLoad(LoadPlan("h0", {0})); });
  // The loss may come before h0's plan: then h0 is refused instead.
  coord.HostLost("h0", "was lost: no heartbeat for 5s");
  const absl::Status lost = h0.get().status();
  INFO(lost.ToString());
  CHECK(absl::IsUnavailable(lost));
  CHECK((lost.message() == "host h0 (ranks 0 of 3 carried there) was lost: no heartbeat for 5s" ||
         lost.message().find("host h0 was lost to the coordinator") == 0));
  CKPT_REQUIRE_ERROR(coord.PlanSpanningLoad(LoadPlan("h0", {0})), absl::StatusCode::kUnavailable,
                     "host h0 was lost to the coordinator; it loads nothing until it registers");
  CHECK(coord.loads_gathering() == 0);
  coord.HostRegistered("h0");
  // Registered again, it gathers: h1 fails it by asking for its rank.
  auto again =
      std::async(std::launch::async, [&] { return coord.PlanSpanningLoad(LoadPlan("h0", {0})); });
  const absl::Status clash = coord.PlanSpanningLoad(LoadPlan("h1", {0})).status();
  CHECK(absl::IsInvalidArgument(clash));
  CHECK(absl::IsInvalidArgument(again.get().status()));
}

TEST_CASE("load gathering: a host lost before its plan came fails the load, naming its ranks",
          "[load_gathering]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  RendezvousOptions rendezvous;
  rendezvous.lost_ranks_grace = absl::Seconds(1);
  Coordinator coord(*backend, kRoot, {}, {}, rendezvous);
  google::protobuf::RepeatedPtrField<v1::CarriedJob> carried;
  v1::CarriedJob* job = carried.Add();
  job->set_job("job");
  job->set_world_size(3);
  job->add_ranks(2);
  coord.HostCarries("h1", carried);
  // Lost while h0 waits for rank 2: at once.
  auto h0 = std::async(std::launch::async, [&] {
    return coord.PlanSpanningLoad(LoadPlan("h0", {0, 1}));
  });
  while (coord.loads_gathering() == 0) std::this_thread::yield();
  coord.HostLost("h1", "was lost: no heartbeat for 5s");
  CKPT_REQUIRE_ERROR(h0.get(), absl::StatusCode::kUnavailable,
                     "host h1 (ranks 2 of 3 carried there) was lost");
  // A load begun after the loss: once past the grace.
  auto later = std::async(std::launch::async, [&] {
    return coord.PlanSpanningLoad(LoadPlan("h0", {0, 1}));
  });
  while (coord.loads_gathering() == 0) std::this_thread::yield();
  coord.ExpireSaves(absl::Now());
  CHECK(coord.loads_gathering() == 1);
  coord.ExpireSaves(absl::Now() + absl::Seconds(2));
  CKPT_REQUIRE_ERROR(later.get(), absl::StatusCode::kUnavailable,
                     "host h1 (ranks 2 of 3 carried there) was lost");
  CHECK(coord.loads_gathering() == 0);
}

}  // namespace
}  // namespace ckpt::coordinator
