// ckptd's start-up: refusing clearly when the pool cannot be had, and
// removing what a crash left behind.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/catch.h"

#include <grpcpp/grpcpp.h>

#include "tests/support/test_daemon.h"

namespace ckpt::testing {

TEST_CASE("ckptd refuses to start when memory cannot hold the pool", "[integration][startup]") {
  // More than is available now: ckptd must refuse it before taking a page,
  // which would otherwise take every free page and end in the OOM killer.
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0, available = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") available = kib * 1024;
  }
  REQUIRE(available > 0);
  const uint64_t too_big = (available + (1ull << 30)) / 4096 * 4096;
  TestDaemon d;
  const absl::Status s = d.Start({"--pool_bytes=" + std::to_string(too_big)});
  INFO(s.ToString());
  REQUIRE_FALSE(s.ok());
  CHECK(s.ToString().find("cannot start") != std::string::npos);
  CHECK(s.ToString().find("MemAvailable") != std::string::npos);
  CHECK(s.ToString().find("--pool_bytes") != std::string::npos);
}

TEST_CASE("ckptd removes its host's stale partial directories and keeps committed steps",
          "[integration][startup]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  for (const ExitInfo& r : d.RunRanks("job", "save", 2, 1, 1)) {
    INFO(r.output);
    REQUIRE(r.ok());
  }
  d.Kill();
  const std::string job = d.root() + "/job";
  REQUIRE(ListDir(job) == std::vector<std::string>{"LATEST", "OWNER", "step-1"});
  // What an earlier ckptd on this host (--host_name=testhost) left, a live
  // save of another host on the shared root, and one of an older version
  // that does not say whose it is.
  const std::string mine = ".step-3.partial-testhost-0123456789abcdef-0";
  const std::string other = ".step-3.partial-otherhost-0123456789abcdef-0";
  const std::string legacy = ".step-4.partial-deadbeef";
  for (const std::string& dir : {mine, other, legacy}) {
    std::filesystem::create_directories(job + "/" + dir + "/data");
    std::ofstream(job + "/" + dir + "/data/x-0.bin") << "half a checkpoint";
  }
  REQUIRE(d.Start().ok());
  CHECK(d.Output().find("removed 1 stale partial") != std::string::npos);
  CHECK(ListDir(job) == std::vector<std::string>{other, legacy, "LATEST", "OWNER", "step-1"});
  CHECK(ListDir(job + "/" + other + "/data") == std::vector<std::string>{"x-0.bin"});
  // The committed step survived, whole.
  for (const ExitInfo& r : d.RunRanks("job", "load", 2, -1, 1)) {
    INFO(r.output);
    CHECK(r.ok());
    CHECK(r.output.find("loaded step 1") != std::string::npos);
  }
  CHECK(d.Ckptctl({"verify", "job", "1"}).ok());
}

}  // namespace ckpt::testing

namespace ckpt::testing {

TEST_CASE("a second ckptd on the same socket refuses to start", "[integration][startup]") {
  TestDaemon first;
  REQUIRE(first.Start().ok());
  const ExitInfo second =
      RunCommand({CkptdPath(), "--storage_root=" + first.root(), "--socket_path=" + first.socket(),
                  "--pool_bytes=" + std::to_string(16 << 20)});
  CHECK(second.exit_code == 1);
  CHECK(second.output.find("another ckptd is serving") != std::string::npos);
  // The first one still serves.
  CHECK(first.Ckptctl({"status"}).ok());
}

TEST_CASE("limit flags bound requests, and a non-positive one refuses to start",
          "[integration][startup]") {
  TestDaemon d;
  const absl::Status refused = d.Start({"--max_tensors_per_plan=0"});
  INFO(refused.ToString());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.ToString().find("--max_tensors_per_plan must be positive") != std::string::npos);
  // The same for the wait of a load spread over hosts.
  const absl::Status no_wait = d.Start({"--peer_wait_s=0"});
  REQUIRE_FALSE(no_wait.ok());
  CHECK(no_wait.ToString().find("--peer_wait_s must be at least 1") != std::string::npos);
  // And for the planner's threads.
  const absl::Status threads = d.Start({"--plan_threads=-1"});
  REQUIRE_FALSE(threads.ok());
  CHECK(threads.ToString().find("--plan_threads must be 0 (every core) to 1024, not -1") !=
        std::string::npos);

  REQUIRE(d.Start({"--max_tensors_per_plan=2", "--max_world_size=4"}).ok());
  auto stub = d.Stub();
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(30); };
  v1::AttachRequest attach;
  attach.set_job("limits");
  attach.set_rank(0);
  attach.set_world_size(5);
  v1::AttachResponse attached;
  {
    grpc::ClientContext c;
    c.set_deadline(deadline());
    const grpc::Status s = stub->Attach(&c, attach, &attached);
    INFO(s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(s.error_message().find("max_world_size") != std::string::npos);
  }
  attach.set_world_size(1);
  {
    grpc::ClientContext c;
    c.set_deadline(deadline());
    REQUIRE(stub->Attach(&c, attach, &attached).ok());
  }
  v1::PlanSaveRequest plan;
  plan.set_session_id(attached.session_id());
  plan.set_step(1);
  for (int i = 0; i < 3; ++i) {
    v1::TensorShard* t = plan.add_shards();
    t->set_fqn("t" + std::to_string(i));
    t->set_dtype(v1::FLOAT32);
    t->add_global_shape(4);
  }
  v1::PlanSaveResponse planned;
  grpc::ClientContext c;
  c.set_deadline(deadline());
  const grpc::Status s = stub->PlanSave(&c, plan, &planned);
  INFO(s.error_message());
  CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(s.error_message().find("max_tensors_per_plan") != std::string::npos);
}

}  // namespace ckpt::testing
