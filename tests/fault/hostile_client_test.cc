// A hostile client against a real ckptd, over the Unix socket and over TCP
// (docs/design.md §7): extreme sizes and counts, names that are paths, absurd
// worlds and ranks, ids that belong to someone else or to no one, absurd
// timeouts and bytes that are not a request at all. Every such request gets
// a clear error naming the bound or the field, the daemon process stays
// alive (checked on the process, not only by a later call working) and its
// memory stays bounded, another job's save commits only its own bytes, and
// afterwards a real save and load over the same transport are bit-exact
// with the pool empty and no session left behind.
//
// tests/fault/bad_input_test.cc covers the ordinary malformed requests over
// the socket; this file goes to the limits, and the attack never uses the
// client library: raw stubs (tests/support/raw_rpc.h) and a generic stub for
// bytes that are not protobuf. Over TCP only the attacks that move no data:
// a TCP principal's sessions map no pool.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "ckpt/client.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

using grpc::StatusCode;

constexpr int kMaxSessions = 32;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();
// The daemon's pool (TestDaemon) plus what planning and serving may take
// beyond it: a request that makes the daemon allocate out of proportion to
// its own size shows up as a peak far above this.
constexpr int64_t kPeakRssBoundKb = (256 + 768) * 1024;

struct Transport {
  const char* name;
  bool tcp;
};

// The daemon under attack over one transport.
class Target {
 public:
  explicit Target(const Transport& transport) : transport_(transport) {
    const std::vector<std::string> flags = {absl::StrCat("--max_sessions=", kMaxSessions),
                                            // A barrier no one else joins ends soon.
                                            "--plan_timeout_s=2"};
    const absl::Status started = transport.tcp ? daemon_.StartWithTcp(flags) : daemon_.Start(flags);
    INFO(started.ToString());
    REQUIRE(started.ok());
    stub_ = daemon_.StubFor(target());
  }

  std::string target() const {
    return transport_.tcp ? daemon_.tcp_address() : "unix:" + daemon_.socket();
  }
  NodeStub& stub() { return *stub_; }
  TestDaemon& daemon() { return daemon_; }
  const char* name() const { return transport_.name; }

  v1::GetStatusResponse Status() {
    v1::GetStatusResponse status;
    const grpc::Status s = Rpc([&](grpc::ClientContext* c) {
      return stub_->GetStatus(c, v1::GetStatusRequest(), &status);
    });
    INFO("GetStatus: " << s.error_message());
    REQUIRE(s.ok());
    return status;
  }

  // The process itself is alive (a later call working is not enough: a
  // supervisor could have restarted it), it answers, and its memory peak
  // stayed bounded.
  void RequireAlive(const std::string& after) {
    INFO("after " << after << " over " << name() << "\nckptd output:\n" << daemon_.Output());
    REQUIRE(daemon_.Running());
    (void)Status();
    const int64_t peak = ProcStatusKb(daemon_.pid(), "VmHWM");
    INFO("daemon peak RSS " << peak << " kB");
    CHECK(peak < kPeakRssBoundKb);
  }

  // No pool bytes held, no save or load in flight, no session attached.
  void RequireIdle(const std::string& after) {
    INFO("after " << after << " over " << name());
    const v1::GetStatusResponse status = Status();
    CHECK(status.pool_used_bytes() == 0);
    CHECK(status.attached_ranks() == 0);
    CHECK(status.loads_in_flight() == 0);
    for (const v1::SaveProgress& save : status.saves()) {
      FAIL_CHECK("save of job " << save.job() << " step " << save.step()
                                << " still listed in phase " << save.phase());
    }
  }

 private:
  const Transport transport_;
  TestDaemon daemon_;
  std::unique_ptr<NodeStub> stub_;
};

grpc::Status PlanRequest(NodeStub& stub, const v1::PlanSaveRequest& request,
                         v1::PlanSaveResponse* response = nullptr) {
  v1::PlanSaveResponse ignored;
  return Rpc([&](grpc::ClientContext* c) {
    return stub.PlanSave(c, request, response != nullptr ? response : &ignored);
  });
}

v1::ObjectDesc Object(const std::string& key, uint64_t length) {
  v1::ObjectDesc o;
  o.set_key(key);
  o.set_length(length);
  return o;
}

grpc::Status CancelSave(NodeStub& stub, const std::string& job, int64_t step) {
  v1::CancelSaveRequest request;
  request.set_job(job);
  request.set_step(step);
  v1::CancelSaveResponse response;
  return Rpc([&](grpc::ClientContext* c) { return stub.CancelSave(c, request, &response); });
}

// Sizes and counts at and beyond every bound, in plans.
void HostilePlans(Target& t) {
  NodeStub& stub = t.stub();
  const std::string job = "sizes";
  const std::string session = AttachOk(stub, job);
  v1::PlanSaveResponse planned;

  // Object lengths near 2^64, alone and summing past 2^64.
  CheckError(Plan(stub, session, 1, {}, &planned, {Object("o", kUint64Max)}),
             StatusCode::RESOURCE_EXHAUSTED, "--max_object_bytes");
  CheckError(Plan(stub, session, 1, {}, &planned, {Object("o", kUint64Max - 4095)}),
             StatusCode::RESOURCE_EXHAUSTED, "object o has 18446744073709547520 bytes");
  {
    std::vector<v1::ObjectDesc> objects;
    // 5000 objects of 4 GiB each: every one within its bound, 20 TiB in all.
    for (int i = 0; i < 5000; ++i) {
      objects.push_back(Object(absl::StrCat("o", i), uint64_t{4} << 30));
    }
    CheckError(Plan(stub, session, 1, {}, &planned, objects), StatusCode::RESOURCE_EXHAUSTED,
               "--max_bytes_per_rank");
  }

  // Shapes at 2^63-1.
  CheckError(Plan(stub, session, 1, {Whole("w", v1::FLOAT32, {kInt64Max})}, &planned),
             StatusCode::INVALID_ARGUMENT, "more than 2^63-1 bytes");
  CheckError(Plan(stub, session, 1, {Whole("w", v1::UINT8, {kInt64Max})}, &planned),
             StatusCode::RESOURCE_EXHAUSTED, "--max_shard_bytes");
  CheckError(Plan(stub, session, 1, {Whole("w", v1::UINT8, {kInt64Max, 2})}, &planned),
             StatusCode::INVALID_ARGUMENT, "more than 2^63-1 elements");
  CheckError(
      Plan(stub, session, 1, {Boxed("w", v1::UINT8, {kInt64Max}, {kInt64Max - 1}, {2})}, &planned),
      StatusCode::INVALID_ARGUMENT, "exceeds dimension 0");
  CheckError(Plan(stub, session, 1, {Flat("w", v1::UINT8, {kInt64Max}, 0, kInt64Max)}, &planned),
             StatusCode::RESOURCE_EXHAUSTED, "--max_shard_bytes");

  // A column of a tensor far too tall for the shard bound, and one at it
  // (2^24 chunks of the test daemon's 64 KiB): both are short requests,
  // answered at once whatever the element count, before anything is sized
  // by it.
  const int64_t rows = int64_t{1} << 40;
  CheckError(Plan(stub, session, 1,
                  {Boxed("tall", v1::FLOAT32, {rows, 1 << 20}, {0, 5}, {rows, 1})}, &planned),
             StatusCode::RESOURCE_EXHAUSTED, "--max_shard_bytes");
  {
    const absl::Time start = absl::Now();
    CheckError(Plan(stub, session, 2,
                    {Boxed("tall", v1::FLOAT32, {rows / 4, 1 << 20}, {0, 5}, {rows / 4, 1})},
                    &planned, {}, /*partial=*/true),
               StatusCode::RESOURCE_EXHAUSTED, "needs 16777216 chunks of 65536 bytes");
    CHECK(absl::Now() - start < absl::Seconds(5));
    t.RequireAlive("a plan of a 1 TiB column");
  }

  // 10^6 tiny tensors (about 17 MB: under the message limit): the count
  // bound answers.
  {
    v1::PlanSaveRequest request;
    request.set_session_id(session);
    request.set_step(3);
    for (int i = 0; i < 1'000'000; ++i) {
      *request.add_shards() = Whole(absl::StrCat("t", i), v1::UINT8, {1});
    }
    INFO("request of " << request.ByteSizeLong() << " bytes");
    CheckError(PlanRequest(stub, request), StatusCode::RESOURCE_EXHAUSTED,
               "plan has 1000000 tensors; the limit is 100000 (--max_tensors_per_plan)");
    // The same count with long names: above the 64 MiB message limit,
    // refused by gRPC before the daemon parses it.
    for (v1::TensorShard& shard : *request.mutable_shards()) {
      shard.mutable_fqn()->append(64, 'x');
    }
    REQUIRE(request.ByteSizeLong() > (size_t{64} << 20));
    const grpc::Status s = PlanRequest(stub, request);
    INFO(s.error_message());
    CHECK(s.error_code() == StatusCode::RESOURCE_EXHAUSTED);
    t.RequireAlive("10^6 tensors in one plan");
  }
  // Exactly at the count bound: planned, at a cost that follows the request.
  {
    v1::PlanSaveRequest request;
    request.set_session_id(session);
    request.set_step(4);
    for (int i = 0; i < 100'000; ++i) {
      *request.add_shards() = Whole(absl::StrCat("t", i), v1::UINT8, {1});
    }
    const absl::Time start = absl::Now();
    const grpc::Status s = PlanRequest(stub, request, &planned);
    const absl::Duration took = absl::Now() - start;
    INFO(s.error_message() << " in " << absl::FormatDuration(took));
    CHECK(s.ok());
    CHECK(took < absl::Seconds(10));
    CHECK(planned.items_size() == 100'000);
    CHECK(CancelSave(stub, job, 4).ok());
    t.RequireAlive("10^5 tensors in one plan");
  }

  // Dimension counts.
  {
    std::vector<int64_t> shape(1'000'000, 1);
    CheckError(Plan(stub, session, 5, {Whole("w", v1::UINT8, shape)}, &planned),
               StatusCode::RESOURCE_EXHAUSTED, "shape has dimensions 1000000; the limit is 64");
    CheckError(
        Plan(stub, session, 5, {Whole("w", v1::UINT8, std::vector<int64_t>(65, 1))}, &planned),
        StatusCode::RESOURCE_EXHAUSTED, "--max_dims");
    CheckError(
        Plan(stub, session, 5,
             {Boxed("w", v1::UINT8, {4, 4}, std::vector<int64_t>(1'000'000, 0), {4, 4})}, &planned),
        StatusCode::RESOURCE_EXHAUSTED, "region box has dimensions 1000000");
  }

  // User metadata: one huge value, very many entries.
  {
    v1::PlanSaveRequest request;
    request.set_session_id(session);
    request.set_step(6);
    (*request.mutable_user_metadata())["k"] = std::string(2 << 20, 'v');
    CheckError(PlanRequest(stub, request), StatusCode::RESOURCE_EXHAUSTED,
               "--max_user_metadata_bytes");
    request.mutable_user_metadata()->clear();
    for (int i = 0; i < 100'000; ++i) (*request.mutable_user_metadata())[absl::StrCat(i)] = "";
    CheckError(PlanRequest(stub, request), StatusCode::RESOURCE_EXHAUSTED,
               "user metadata has 100000 entries; the limit is 1024");
  }

  // Names beyond NAME_MAX, and names that are paths.
  CheckError(Plan(stub, session, 7, {Whole(std::string(256, 'n'), v1::UINT8, {1})}, &planned),
             StatusCode::RESOURCE_EXHAUSTED, "tensor name is 256 bytes; the limit is 255");
  CheckError(Plan(stub, session, 7, {}, &planned, {Object(std::string(1 << 20, 'n'), 1)}),
             StatusCode::RESOURCE_EXHAUSTED, "object name is 1048576 bytes");
  for (const std::string& name :
       {std::string("../../../../etc/passwd"), std::string("/abs"), std::string("a/b"),
        std::string(".."), std::string("."), std::string("x\0y", 3), std::string("n\xc3\xa9"),
        std::string("a b"), std::string("..\\x")}) {
    INFO("name '" << name << "'");
    CheckError(Plan(stub, session, 7, {Whole(name, v1::UINT8, {1})}, &planned),
               StatusCode::INVALID_ARGUMENT, "tensor name");
    CheckError(Plan(stub, session, 7, {}, &planned, {Object(name, 1)}),
               StatusCode::INVALID_ARGUMENT, "object name");
    v1::AttachResponse attached;
    CheckError(AttachRaw(stub, name, 0, 1, &attached), StatusCode::INVALID_ARGUMENT, "job name");
  }
  CheckError(Plan(stub, std::string(1 << 20, 's'), 7, {Whole("w", v1::UINT8, {1})}, &planned),
             StatusCode::NOT_FOUND, "attach first");
  // Nothing was created for any of it: the root holds no job but this one,
  // and that no step, the test directory nothing new.
  CHECK(ListDir(t.daemon().root()) == std::vector<std::string>({job}));
  // (Its owner record, from the attach, is all the job directory holds.)
  CHECK(ListDir(t.daemon().job_dir(job)) == std::vector<std::string>{"OWNER"});
  std::vector<std::string> test_dir = {"ckptd.sock", "ckptd.sock.seg", "root"};
  if (t.daemon().tcp_address() != "") test_dir.push_back("tls");  // StartWithTcp's certificate
  CHECK(ListDir(t.daemon().dir()) == test_dir);

  CHECK(DetachRaw(stub, session).ok());
  t.RequireAlive("hostile plans");
  t.RequireIdle("hostile plans");
}

// Valid plans with extreme geometry save and load bit-exact: a few bytes at
// both ends of a tensor of 2^63-1 elements, and one column of a tall tensor.
void ExtremeGeometrySaves(Target& t) {
  RawRank rank(t.stub(), "geometry");
  const int64_t rows = (int64_t{1} << 24) + 3;
  std::vector<RawTensor> tensors(3);
  tensors[0].shard = Boxed("huge", v1::UINT8, {kInt64Max}, {1000}, {16});
  tensors[1].shard = Flat("huge", v1::UINT8, {kInt64Max}, kInt64Max - 17, kInt64Max);
  tensors[2].shard = Boxed("tall", v1::FLOAT32, {rows, 1024}, {0, 1023}, {rows, 1});
  tensors[0].bytes = Pattern(16, 1);
  tensors[1].bytes = Pattern(17, 2);
  tensors[2].bytes = Pattern(static_cast<size_t>(rows) * 4, 3);
  const absl::Time start = absl::Now();
  const grpc::Status saved = rank.Save(1, tensors, {}, /*partial=*/true);
  INFO(saved.error_message());
  REQUIRE(saved.ok());
  INFO("saved in " << absl::FormatDuration(absl::Now() - start));

  // The same regions, and parts of them that other shardings would ask for.
  std::vector<RawTensor> wanted(5);
  wanted[0].shard = tensors[0].shard;
  wanted[1].shard = tensors[1].shard;
  wanted[2].shard = tensors[2].shard;
  wanted[3].shard = Flat("huge", v1::UINT8, {kInt64Max}, kInt64Max - 5, kInt64Max);
  wanted[4].shard = Boxed("tall", v1::FLOAT32, {rows, 1024}, {rows - 1000, 1023}, {1000, 1});
  std::map<std::string, std::string> no_objects;
  const grpc::Status loaded = rank.Load(1, wanted, no_objects);
  INFO(loaded.error_message());
  REQUIRE(loaded.ok());
  CHECK(wanted[0].bytes == tensors[0].bytes);
  CHECK(wanted[1].bytes == tensors[1].bytes);
  CHECK(wanted[2].bytes == tensors[2].bytes);
  CHECK(wanted[3].bytes == tensors[1].bytes.substr(12));
  CHECK(wanted[4].bytes == tensors[2].bytes.substr((rows - 1000) * 4));
  t.RequireAlive("extreme geometry saves");
}

// Worlds, ranks and session counts out of bounds.
void HostileAttaches(Target& t) {
  NodeStub& stub = t.stub();
  v1::AttachResponse attached;
  const int32_t int_max = std::numeric_limits<int32_t>::max();
  const int32_t int_min = std::numeric_limits<int32_t>::min();
  CheckError(AttachRaw(stub, "world", 0, int_max, &attached), StatusCode::RESOURCE_EXHAUSTED,
             "world size 2147483647; the limit is 65536 (--max_world_size)");
  CheckError(AttachRaw(stub, "world", int_max - 1, int_max, &attached),
             StatusCode::RESOURCE_EXHAUSTED, "--max_world_size");
  CheckError(AttachRaw(stub, "world", 5, 5, &attached), StatusCode::INVALID_ARGUMENT,
             "rank 5 is outside world size 5");
  CheckError(AttachRaw(stub, "world", int_max, 1, &attached), StatusCode::INVALID_ARGUMENT,
             "rank 2147483647 is outside world size 1");
  CheckError(AttachRaw(stub, "world", -1, 4, &attached), StatusCode::INVALID_ARGUMENT,
             "rank -1 is outside world size 4");
  CheckError(AttachRaw(stub, "world", int_min, 4, &attached), StatusCode::INVALID_ARGUMENT,
             "rank -2147483648");
  CheckError(AttachRaw(stub, "world", 0, int_min, &attached), StatusCode::INVALID_ARGUMENT,
             "world size -2147483648 is not positive");
  {
    v1::AttachRequest request;
    request.set_job("world");
    request.set_world_size(1);
    request.set_local_rank(-1);
    CheckError(Rpc([&](grpc::ClientContext* c) { return stub.Attach(c, request, &attached); }),
               StatusCode::INVALID_ARGUMENT, "local rank -1 is negative");
  }

  // The largest world allowed, with one rank present: the barrier of its
  // save and of its load ends at the plan timeout naming the missing ranks,
  // and what the daemon keeps per rank of that world stays small.
  {
    const std::string session = AttachOk(stub, "bigworld", 0, 65536);
    v1::PlanSaveResponse planned;
    CheckError(Plan(stub, session, 1, {Whole("w", v1::UINT8, {8})}, &planned),
               StatusCode::DEADLINE_EXCEEDED, "ranks [1, 2, 3");
    CheckError(LoadRaw(stub, session, kLatestStep, {Whole("w", v1::UINT8, {8})}),
               StatusCode::DEADLINE_EXCEEDED, "ranks [1, 2, 3");
    CHECK(DetachRaw(stub, session).ok());
    t.RequireAlive("a world of 65536 with one rank");
  }

  // Many saves of the largest world at once, each waiting for ranks that
  // never come: what the daemon keeps for a save follows the ranks present,
  // not the world size (it was about 20 MB per save of a 65536-world), and
  // one rank cannot wait in more than a few barriers at once.
  {
    constexpr int kJobs = 24;
    std::vector<std::string> sessions;
    for (int i = 0; i < kJobs; ++i) {
      sessions.push_back(AttachOk(stub, absl::StrCat("bigworld", i), 0, 65536));
    }
    const int64_t before_kb = ProcStatusKb(t.daemon().pid(), "VmRSS");
    std::vector<grpc::Status> statuses(kJobs + 8);
    std::vector<std::thread> planners;
    for (int i = 0; i < kJobs + 8; ++i) {
      planners.emplace_back([&, i] {
        v1::PlanSaveResponse planned;
        // The last 8 are more steps of the first job, from the same rank.
        const int job = i < kJobs ? i : 0;
        statuses[i] = Plan(stub, sessions[job], i, {Whole("w", v1::UINT8, {8})}, &planned);
      });
    }
    absl::SleepFor(absl::Milliseconds(1500));  // inside the 2 s plan timeout
    const int64_t waiting_kb = ProcStatusKb(t.daemon().pid(), "VmRSS");
    for (std::thread& planner : planners) planner.join();
    const int64_t after_kb = ProcStatusKb(t.daemon().pid(), "VmRSS");
    INFO("daemon RSS " << before_kb << " kB, " << waiting_kb << " kB with " << kJobs
                       << " saves waiting, " << after_kb << " kB after");
    CHECK(waiting_kb - before_kb < 64 * 1024);
    CHECK(after_kb - before_kb < 64 * 1024);
    int exhausted = 0;
    for (int i = 0; i < kJobs + 8; ++i) {
      INFO("plan " << i << ": " << statuses[i].error_message());
      if (statuses[i].error_code() == StatusCode::RESOURCE_EXHAUSTED) {
        CHECK_THAT(statuses[i].error_message(),
                   Catch::Contains("PlanSave or Load calls waiting; the limit is 3"));
        ++exhausted;
      } else {
        CHECK(statuses[i].error_code() == StatusCode::DEADLINE_EXCEEDED);
      }
    }
    // The first job's rank waited in at most 3 of its 9 saves.
    CHECK(exhausted >= 6);
    for (const std::string& session : sessions) CHECK(DetachRaw(stub, session).ok());
    t.RequireAlive("many saves of a 65536-world waiting");
  }

  // Sessions beyond --max_sessions.
  {
    std::vector<std::string> sessions;
    for (int i = 0; i < kMaxSessions; ++i) sessions.push_back(AttachOk(stub, "many", i, 65536));
    CheckError(AttachRaw(stub, "many", kMaxSessions, 65536, &attached),
               StatusCode::RESOURCE_EXHAUSTED,
               absl::StrCat(kMaxSessions, " ranks are attached; the limit is ", kMaxSessions,
                            " (--max_sessions)"));
    CheckError(AttachRaw(stub, "other", 0, 1, &attached), StatusCode::RESOURCE_EXHAUSTED,
               "--max_sessions");
    CHECK(t.Status().attached_ranks() == kMaxSessions);
    // A slot freed is a slot to take.
    CHECK(DetachRaw(stub, sessions.back()).ok());
    sessions.back() = AttachOk(stub, "other");
    for (const std::string& s : sessions) CHECK(DetachRaw(stub, s).ok());
    // Detaching twice, or a session never given out.
    CheckError(DetachRaw(stub, sessions.front()), StatusCode::NOT_FOUND, "attach first");
    CheckError(DetachRaw(stub, std::string(4096, 'x')), StatusCode::NOT_FOUND, "attach first");
  }
  t.RequireAlive("hostile attaches");
  t.RequireIdle("hostile attaches");
}

// Ids that belong to another job, another world, or to no one; one job
// trying to write into another's save. The victim's save commits its own
// bytes only.
void ForeignIds(Target& t) {
  NodeStub& stub = t.stub();
  RawRank victim(stub, "victim");
  RawRank attacker(stub, "attacker");
  // The victim's job, but another world: rank 3 of 4.
  const std::string stranger = AttachOk(stub, "victim", 3, 4);

  std::vector<RawTensor> tensors(1);
  tensors[0].shard = Whole("w", v1::FLOAT32, {64, 64});
  tensors[0].bytes = Pattern(64 * 64 * 4, 11);
  std::vector<RawObject> objects = {{"rng", Pattern(100, 12)}};
  v1::PlanSaveResponse planned;
  REQUIRE(victim.PlanSave(9, tensors, objects, &planned).ok());
  const std::string& save_id = planned.save_id();
  v1::SaveBatch batch;
  REQUIRE(victim.NextBatch(save_id, &batch).ok());
  REQUIRE(batch.last());

  auto submit = [&](const std::string& session, const std::string& id, uint64_t batch_id) {
    v1::SubmitSnapshotRequest request;
    request.set_session_id(session);
    request.set_save_id(id);
    request.set_batch_id(batch_id);
    v1::SubmitSnapshotResponse response;
    return Rpc([&](grpc::ClientContext* c) { return stub.SubmitSnapshot(c, request, &response); });
  };
  auto next = [&](const std::string& session, const std::string& id) {
    v1::NextSaveBatchRequest request;
    request.set_session_id(session);
    request.set_save_id(id);
    v1::SaveBatch response;
    return Rpc([&](grpc::ClientContext* c) { return stub.NextSaveBatch(c, request, &response); });
  };
  auto wait = [&](const std::string& session, const std::string& id, uint64_t timeout_ms) {
    v1::WaitSaveRequest request;
    request.set_session_id(session);
    request.set_save_id(id);
    request.set_timeout_ms(timeout_ms);
    v1::WaitSaveResponse response;
    return Rpc([&](grpc::ClientContext* c) { return stub.WaitSave(c, request, &response); });
  };

  // Job A's session into job B's save, by its id.
  CheckError(submit(attacker.session(), save_id, batch.batch_id()), StatusCode::PERMISSION_DENIED,
             "job attacker");
  CheckError(next(attacker.session(), save_id), StatusCode::PERMISSION_DENIED, "job attacker");
  CheckError(wait(attacker.session(), save_id, 1), StatusCode::NOT_FOUND, "is unknown");
  // The right job but not one of the save's ranks (rank 3 of a world of 4,
  // beyond the save's world of 1).
  CheckError(submit(stranger, save_id, batch.batch_id()), StatusCode::PERMISSION_DENIED,
             "rank 3 of 4");
  CheckError(next(stranger, save_id), StatusCode::PERMISSION_DENIED, "rank 3 of 4");
  {
    v1::PlanSaveResponse ignored;
    CheckError(Plan(stub, stranger, 9, {Whole("w", v1::FLOAT32, {64, 64})}, &ignored),
               StatusCode::PERMISSION_DENIED, "rank 3 of 4");
  }
  // Made-up ids.
  for (const std::string& id : {std::string(), std::string("victim/9/0000000000000000"),
                                std::string(1 << 20, 'i'), save_id + "x"}) {
    CheckError(submit(victim.session(), id, batch.batch_id()), StatusCode::NOT_FOUND, "unknown");
    CheckError(next(victim.session(), id), StatusCode::NOT_FOUND, "unknown");
    CheckError(wait(victim.session(), id, 1), StatusCode::NOT_FOUND, "unknown");
  }
  for (uint64_t id : {uint64_t{0}, batch.batch_id() + 1000, kUint64Max}) {
    CheckError(submit(victim.session(), save_id, id), StatusCode::INVALID_ARGUMENT,
               "not an open batch");
  }
  CheckError(submit("no-such-session", save_id, batch.batch_id()), StatusCode::NOT_FOUND,
             "attach first");

  // The attacker's own save of the same step number, with other bytes, runs
  // at the same time and must not mix with the victim's.
  std::vector<RawTensor> attacker_tensors = tensors;
  attacker_tensors[0].bytes = Pattern(64 * 64 * 4, 666);
  REQUIRE(attacker.Save(9, attacker_tensors, {{"rng", Pattern(100, 667)}}).ok());

  // The victim finishes; its checkpoint holds exactly its own bytes.
  REQUIRE(victim.Fill(batch, tensors, objects).ok());
  REQUIRE(victim.Submit(save_id, batch.batch_id()).ok());
  REQUIRE(WaitSaveRaw(stub, victim.session(), save_id).ok());
  std::vector<RawTensor> loaded(1);
  loaded[0].shard = tensors[0].shard;
  std::map<std::string, std::string> loaded_objects = {{"rng", ""}};
  REQUIRE(victim.Load(9, loaded, loaded_objects).ok());
  CHECK(loaded[0].bytes == tensors[0].bytes);
  CHECK(loaded_objects["rng"] == objects[0].bytes);

  // Loads: another job's load id, made-up ones, and another job's step.
  {
    v1::LoadRequest request;
    request.set_session_id(victim.session());
    request.set_step(9);
    *request.add_tensors() = tensors[0].shard;
    v1::LoadResponse response;
    REQUIRE(Rpc([&](grpc::ClientContext* c) { return stub.Load(c, request, &response); }).ok());
    auto next_load = [&](const std::string& session, const std::string& id, uint64_t done) {
      v1::NextLoadBatchRequest next_request;
      next_request.set_session_id(session);
      next_request.set_load_id(id);
      next_request.set_done_batch_id(done);
      v1::LoadBatch batch_out;
      return Rpc(
          [&](grpc::ClientContext* c) { return stub.NextLoadBatch(c, next_request, &batch_out); });
    };
    CheckError(next_load(attacker.session(), response.load_id(), 0), StatusCode::PERMISSION_DENIED,
               "job attacker");
    CheckError(next_load(stranger, response.load_id(), 0), StatusCode::PERMISSION_DENIED,
               "rank 3 of 4");
    for (const std::string& id :
         {std::string(), std::string(1 << 20, 'l'), response.load_id() + "x"}) {
      CheckError(next_load(victim.session(), id, 0), StatusCode::NOT_FOUND, "unknown");
    }
    // Releasing batches never handed out, then finishing the load properly.
    for (uint64_t done : {kUint64Max, uint64_t{12345}}) {
      INFO("done_batch_id " << done);
      const grpc::Status s = next_load(victim.session(), response.load_id(), done);
      CHECK((s.ok() || s.error_code() == StatusCode::INVALID_ARGUMENT));
    }
    std::vector<RawTensor> again(1);
    again[0].shard = tensors[0].shard;
    std::map<std::string, std::string> none;
    // The abandoned load above must not block this one.
    const grpc::Status s = victim.Load(9, again, none);
    INFO(s.error_message());
    CHECK(s.ok());
    CHECK(again[0].bytes == tensors[0].bytes);
  }
  CHECK(DetachRaw(stub, stranger).ok());
  t.RequireAlive("foreign ids");
}

// Loads of steps that are not there or not the caller's; WaitSave with
// absurd timeouts.
void LoadsAndWaits(Target& t) {
  NodeStub& stub = t.stub();
  RawRank rank(stub, "waits");
  const std::vector<v1::TensorShard> w = {Whole("w", v1::FLOAT32, {64, 64})};
  CheckError(LoadRaw(stub, rank.session(), 999, w), StatusCode::NOT_FOUND, "999");
  CheckError(LoadRaw(stub, rank.session(), kInt64Max, w), StatusCode::NOT_FOUND,
             "9223372036854775807");
  CheckError(LoadRaw(stub, rank.session(), -2, w), StatusCode::INVALID_ARGUMENT, "-2");
  CheckError(LoadRaw(stub, rank.session(), std::numeric_limits<int64_t>::min(), w),
             StatusCode::INVALID_ARGUMENT, "-9223372036854775808");
  // Step 9 exists, but it is job victim's: this job has none.
  CheckError(LoadRaw(stub, rank.session(), 9, w), StatusCode::NOT_FOUND, "waits");
  CheckError(LoadRaw(stub, rank.session(), kLatestStep, w), StatusCode::NOT_FOUND,
             "no committed checkpoint");

  std::vector<RawTensor> tensors(1);
  tensors[0].shard = w[0];
  tensors[0].bytes = Pattern(64 * 64 * 4, 21);
  v1::PlanSaveResponse planned;
  REQUIRE(rank.PlanSave(3, tensors, {}, &planned).ok());
  auto wait = [&](uint64_t timeout_ms, v1::WaitSaveResponse* response) {
    v1::WaitSaveRequest request;
    request.set_session_id(rank.session());
    request.set_save_id(planned.save_id());
    request.set_timeout_ms(timeout_ms);
    return Rpc([&](grpc::ClientContext* c) { return stub.WaitSave(c, request, response); },
               std::chrono::seconds(20));
  };
  // A tiny timeout answers "not done" at once.
  {
    v1::WaitSaveResponse response;
    const absl::Time start = absl::Now();
    CHECK(wait(1, &response).ok());
    CHECK_FALSE(response.done());
    CHECK(absl::Now() - start < absl::Seconds(2));
  }
  // Absurd ones neither wrap to "now" nor overflow the daemon's clock:
  // each waits (bounded by the daemon's wait slice, 10 s) and answers as
  // soon as the save commits.
  {
    const std::vector<uint64_t> timeouts = {kUint64Max, uint64_t{1} << 63, uint64_t{1} << 40,
                                            kUint64Max / 1000};
    std::vector<grpc::Status> statuses(timeouts.size());
    std::vector<v1::WaitSaveResponse> responses(timeouts.size());
    std::vector<absl::Notification> returned(timeouts.size());
    std::vector<std::thread> waiters;
    for (size_t i = 0; i < timeouts.size(); ++i) {
      waiters.emplace_back([&, i] {
        statuses[i] = wait(timeouts[i], &responses[i]);
        returned[i].Notify();
      });
    }
    absl::SleepFor(absl::Milliseconds(500));
    for (size_t i = 0; i < timeouts.size(); ++i) {
      INFO("timeout_ms " << timeouts[i]);
      CHECK_FALSE(returned[i].HasBeenNotified());
    }
    v1::SaveBatch batch;
    REQUIRE(rank.NextBatch(planned.save_id(), &batch).ok());
    REQUIRE(rank.Fill(batch, tensors, {}).ok());
    REQUIRE(rank.Submit(planned.save_id(), batch.batch_id()).ok());
    for (size_t i = 0; i < timeouts.size(); ++i) {
      INFO("timeout_ms " << timeouts[i]);
      CHECK(returned[i].WaitForNotificationWithTimeout(absl::Seconds(5)));
    }
    for (std::thread& waiter : waiters) waiter.join();
    for (size_t i = 0; i < timeouts.size(); ++i) {
      INFO("timeout_ms " << timeouts[i] << ": " << statuses[i].error_message());
      CHECK(statuses[i].ok());
      CHECK(responses[i].done());
    }
  }
  t.RequireAlive("loads and waits");
}

// Bytes that are not a request at all, to every method and to none.
void GarbageBytes(Target& t) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(256 << 20);
  grpc::GenericStub generic(
      grpc::CreateCustomChannel(t.target(), t.daemon().CredentialsFor(t.target()), args));
  auto call = [&](const std::string& method, const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    return status;
  };
  std::string nested;  // groups nested far beyond the parser's recursion limit
  for (int i = 0; i < 100'000; ++i) nested += '\x0b';  // start group, field 1
  const std::vector<std::string> payloads = {
      std::string("\xff", 1),
      Pattern(1024, 31),
      // A length-delimited field 1 that claims 2^32-1 bytes.
      std::string("\x0a\xff\xff\xff\xff\x0f", 6),
      // A varint that never ends.
      std::string(64, '\x80'),
      // Field 2 (an int32 in most requests) sent as a 4 GiB string.
      std::string("\x12\x80\x80\x80\x80\x10", 6),
      nested,
      // An end-group tag with no group open.
      std::string("\x0c", 1),
      Pattern(8 << 20, 32),
  };
  for (const char* method :
       {"Attach", "Detach", "Watch", "PlanSave", "NextSaveBatch", "SubmitSnapshot", "WaitSave",
        "Load", "NextLoadBatch", "GetStatus", "ListCheckpoints", "InspectCheckpoint",
        "VerifyCheckpoint", "CancelSave", "CollectGarbage"}) {
    const std::string path = absl::StrCat("/ckpt.v1.NodeService/", method);
    for (size_t i = 0; i < payloads.size(); ++i) {
      const grpc::Status s = call(path, payloads[i]);
      INFO(path << " payload " << i << ": " << s.error_code() << " " << s.error_message());
      // The daemon could not parse it: gRPC answers for it before any
      // handler runs (INTERNAL; UNIMPLEMENTED with no message for a callback
      // method, Watch). An empty message is valid protobuf; these are not.
      const StatusCode expected =
          std::string(method) == "Watch" ? StatusCode::UNIMPLEMENTED : StatusCode::INTERNAL;
      CHECK(s.error_code() == expected);
    }
  }
  CHECK(call("/ckpt.v1.NodeService/NoSuchMethod", "").error_code() == StatusCode::UNIMPLEMENTED);
  CHECK(call("/no.Such/Service", Pattern(100, 33)).error_code() == StatusCode::UNIMPLEMENTED);
  CHECK(call("", "").error_code() != StatusCode::OK);
  t.RequireAlive("garbage bytes");
}

// A real save and load over the transport after all of the above: a 0-d
// tensor, a zero-size tensor, an empty object among ordinary ones.
void RealSaveAndLoad(Target& t, const Transport& transport) {
  const std::string job = "after";
  const std::vector<int64_t> matrix = {33, 7};
  const std::string scalar = Pattern(8, 41);
  const std::string cells = Pattern(33 * 7 * 2, 42);
  const std::string rng = Pattern(777, 43);

  if (!transport.tcp) {
    // The client library, as a trainer would.
    ClientOptions options;
    options.socket_path = t.daemon().socket();
    options.job = job;
    auto client = Client::Attach(options);
    INFO(client.status().ToString());
    REQUIRE(client.ok());
    std::string scalar_in = scalar;
    std::string cells_in = cells;
    char nothing = 0;
    std::vector<HostTensor> tensors(3);
    tensors[0] = {"scalar", DType::kFloat64, {}, Region::Whole(), scalar_in.data()};
    tensors[1] = {"empty", DType::kFloat32, {0, 5}, Region::Whole(), &nothing};
    tensors[2] = {"cells", DType::kInt16, matrix, Region::Whole(), cells_in.data()};
    auto handle = (*client)->Save(1, tensors, {{"rng", false, rng}, {"none", false, ""}});
    REQUIRE(handle.ok());
    const absl::Status persisted = (*handle)->WaitPersisted();
    INFO(persisted.ToString());
    REQUIRE(persisted.ok());

    std::string scalar_out(8, '\0');
    std::string cells_out(cells.size(), '\0');
    std::vector<HostTensor> wanted(3);
    wanted[0] = {"scalar", DType::kFloat64, {}, Region::Whole(), scalar_out.data()};
    wanted[1] = {"empty", DType::kFloat32, {0, 5}, Region::Whole(), &nothing};
    // Another sharding: the last 20 rows.
    wanted[2] = {"cells", DType::kInt16, matrix, Region::Box({13, 0}, {20, 7}), cells_out.data()};
    std::string rng_out = "x";
    std::string none_out = "x";
    absl::StatusOr<int64_t> loaded =
        (*client)->Load(kLatestStep, wanted, {{"rng", &rng_out}, {"none", &none_out}});
    INFO(loaded.status().ToString());
    REQUIRE(loaded.ok());
    CHECK(*loaded == 1);
    CHECK(scalar_out == scalar);
    CHECK(cells_out.substr(0, 20 * 7 * 2) == cells.substr(13 * 7 * 2));
    CHECK(rng_out == rng);
    CHECK(none_out.empty());
  } else {
    RawRank rank(t.stub(), job);
    std::vector<RawTensor> tensors(3);
    tensors[0] = {Whole("scalar", v1::FLOAT64, {}), scalar};
    tensors[1] = {Whole("empty", v1::FLOAT32, {0, 5}), ""};
    tensors[2] = {Whole("cells", v1::INT16, matrix), cells};
    const grpc::Status saved = rank.Save(1, tensors, {{"rng", rng}, {"none", ""}});
    INFO(saved.error_message());
    REQUIRE(saved.ok());
    std::vector<RawTensor> wanted(3);
    wanted[0].shard = tensors[0].shard;
    wanted[1].shard = tensors[1].shard;
    wanted[2].shard = Boxed("cells", v1::INT16, matrix, {13, 0}, {20, 7});
    std::map<std::string, std::string> objects = {{"rng", "x"}, {"none", "x"}};
    int64_t step = 0;
    const grpc::Status loaded = rank.Load(kLatestStep, wanted, objects, &step);
    INFO(loaded.error_message());
    REQUIRE(loaded.ok());
    CHECK(step == 1);
    CHECK(wanted[0].bytes == scalar);
    CHECK(wanted[1].bytes.empty());
    CHECK(wanted[2].bytes == cells.substr(13 * 7 * 2));
    CHECK(objects["rng"] == rng);
    CHECK(objects["none"].empty());
  }
  t.RequireAlive("a real save and load");
  t.RequireIdle("a real save and load");
}

// Watch streams the daemon refuses (no such session, another's id) and
// that their client then drops at once: the refusal and the cancel both
// end the stream, and a second end aborted the daemon (gRPC's callback
// API allows one Finish). Many in a row: the cancel must land while the
// refusal is still being sent.
void RefusedWatchesDropped(Target& t) {
  for (int i = 0; i < 200; ++i) {
    grpc::ClientContext context;
    v1::WatchRequest request;
    request.set_session_id(i % 2 == 0 ? "no-such-session" : std::string(40, 'x'));
    std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> reader = t.stub().Watch(&context, request);
    context.TryCancel();
    const grpc::Status status = reader->Finish();
    CHECK_FALSE(status.ok());
  }
  t.RequireAlive("refused Watch streams dropped by their client");
}

}  // namespace

TEST_CASE("A hostile raw-gRPC client gets clear errors and ckptd keeps serving",
          "[fault][hostile]") {
  const Transport transport = GENERATE(Transport{"unix socket", false}, Transport{"tcp", true});
  INFO("transport: " << transport.name);
  Target t(transport);

  // Some attack with ranks that map the pool over the segment socket: a
  // TCP principal acts as no local user (daemon/auth/principal.h), so its
  // sessions map nothing, and the data path is the Unix socket's alone.
  const bool maps_pool = !transport.tcp;
  HostilePlans(t);
  if (maps_pool) ExtremeGeometrySaves(t);
  HostileAttaches(t);
  if (maps_pool) ForeignIds(t);
  if (maps_pool) LoadsAndWaits(t);
  RefusedWatchesDropped(t);
  GarbageBytes(t);
  t.RequireIdle("the attack");
  if (maps_pool) RealSaveAndLoad(t, transport);
  REQUIRE(t.daemon().Running());
}

}  // namespace ckpt::testing
