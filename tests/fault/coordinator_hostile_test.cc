// The coordinator's CoordinatorService and ClusterService against a hostile
// raw-gRPC client over TCP: no token, hosts that are not registered, plans
// with worlds and ranks out of bounds, reports and aborts for saves that do
// not exist, oversized reasons and id lists, a plan whose caller goes away.
// Each gets a clear error (or a bounded answer) at once, and afterwards the
// cluster still saves and loads a job spread over its hosts.
#include <grpcpp/grpcpp.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "ckpt/v1/cluster.grpc.pb.h"
#include "ckpt/v1/coordinator.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/coordinator_rpc.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/test_cluster.h"

namespace ckpt::testing {
namespace {

TEST_CASE("A hostile client cannot crash, wedge or bloat the coordinator", "[multi_host]") {
  TestCluster cluster;
  REQUIRE(cluster.Start(2).ok());
  TestDaemon& coordinator = cluster.coordinator();
  auto stub = v1::CoordinatorService::NewStub(Channel(coordinator, ""));

  SECTION("refusals") {
    auto anonymous = v1::CoordinatorService::NewStub(Channel(coordinator, "none"));
    CHECK(Send(*anonymous, SavePlan("h0", 2, {0})).error_code() ==
          grpc::StatusCode::UNAUTHENTICATED);
    CheckError(Send(*stub, SavePlan("stranger", 2, {0})), grpc::StatusCode::FAILED_PRECONDITION,
               "host stranger is not registered");
    CheckError(Send(*stub, SavePlan("h0", 1 << 30, {0})), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "--max_world_size");
    CheckError(Send(*stub, SavePlan("h0", 2, {0, 1, 1})), grpc::StatusCode::INVALID_ARGUMENT,
               "sent 3 ranks of a world of 2");
    CheckError(Send(*stub, SavePlan("h0", 2, {7})), grpc::StatusCode::INVALID_ARGUMENT,
               "rank 7 of a world of 2");
    CheckError(Send(*stub, SavePlan("h0", 0, {0})), grpc::StatusCode::INVALID_ARGUMENT,
               "world size 0");

    // A report for a save that does not exist, with 100000 checksums and
    // an id of 100 KB: refused, the id quoted short enough for the reply.
    v1::NodePersistReport report;
    report.mutable_host()->set_host("h0");
    report.set_save_id(std::string(100000, 'x'));
    for (int i = 0; i < 100000; ++i) report.add_checksums()->set_file("data/h0-0.bin");
    grpc::ClientContext context;
    Deadline(context);
    v1::CommitResult result;
    const grpc::Status reported = stub->ReportPersisted(&context, report, &result);
    INFO(reported.error_message());
    CHECK(reported.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK(absl::StrContains(reported.error_message(), "(100000 bytes)"));

    // Aborts of unknown saves, with a 10 MB reason: accepted, nothing kept.
    v1::AbortSaveRequest abort;
    abort.set_job("nojob");
    abort.set_step(3);
    abort.set_reason(std::string(10 << 20, 'r'));
    grpc::ClientContext abort_context;
    Deadline(abort_context);
    v1::AbortSaveResponse aborted;
    CHECK(stub->AbortSave(&abort_context, abort, &aborted).ok());
  }

  SECTION("load plans") {
    CheckError(Send(*stub, LoadPlan("stranger", 2, {0})), grpc::StatusCode::FAILED_PRECONDITION,
               "host stranger is not registered");
    CheckError(Send(*stub, LoadPlan("h0", 1 << 30, {0})), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "--max_world_size");
    CheckError(Send(*stub, LoadPlan("h0", 0, {0})), grpc::StatusCode::INVALID_ARGUMENT,
               "world size 0");
    CheckError(Send(*stub, LoadPlan("h0", 2, {0, 1, 1})), grpc::StatusCode::INVALID_ARGUMENT,
               "sent 3 ranks of a world of 2");
    CheckError(Send(*stub, LoadPlan("h0", 2, {7})), grpc::StatusCode::INVALID_ARGUMENT,
               "rank 7 of a world of 2");
    CheckError(Send(*stub, LoadPlan("h0", 2, {0}, v1::LOAD_TIER_ANY, std::string(300, 'j'))),
               grpc::StatusCode::INVALID_ARGUMENT, "job");
    // A caller that goes away leaves nothing waiting: the two hosts' plans
    // then meet, and both hear the job has no checkpoint.
    CHECK(Send(*stub, LoadPlan("h0", 2, {0}), absl::Seconds(1)).error_code() ==
          grpc::StatusCode::DEADLINE_EXCEEDED);
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (cluster.Status().loads_gathering() > 0 && absl::Now() < until) {
    }
    CHECK(cluster.Status().loads_gathering() == 0);
    std::vector<grpc::Status> answers(2);
    std::thread other([&] { answers[1] = Send(*stub, LoadPlan("h1", 2, {1})); });
    answers[0] = Send(*stub, LoadPlan("h0", 2, {0}));
    other.join();
    for (const grpc::Status& s : answers) {
      INFO(s.error_message());
      CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
    }
    // The same rank from two hosts fails both.
    std::thread clash([&] { answers[1] = Send(*stub, LoadPlan("h1", 3, {1})); });
    answers[0] = Send(*stub, LoadPlan("h0", 3, {0, 1}));
    clash.join();
    for (const grpc::Status& s : answers) {
      INFO(s.error_message());
      CHECK(s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED);
      CHECK(s.error_code() != grpc::StatusCode::OK);
    }
  }

  SECTION("a heartbeat listing 100000 saves gets a bounded answer") {
    const v1::ClusterStatusResponse status = cluster.Status();
    REQUIRE(status.hosts_size() == 2);
    auto cluster_stub = v1::ClusterService::NewStub(Channel(coordinator, ""));
    v1::HeartbeatRequest beat;
    beat.set_host(status.hosts(0).host().host());
    beat.set_instance(status.hosts(0).instance());
    for (int i = 0; i < 100000; ++i) beat.add_save_ids("job/1/unknown-" + std::to_string(i));
    grpc::ClientContext context;
    Deadline(context);
    v1::HeartbeatResponse answer;
    REQUIRE(cluster_stub->Heartbeat(&context, beat, &answer).ok());
    CHECK(answer.failed_saves_size() <= 1024);
  }

  SECTION("a plan whose caller goes away does not hold the job's step") {
    // h0 says the world has 2 ranks and sends one, then gives up.
    CHECK(Send(*stub, SavePlan("h0", 2, {0}), absl::Seconds(1)).error_code() ==
          grpc::StatusCode::DEADLINE_EXCEEDED);
    // The save it opened fails as its caller goes (the coordinator looks
    // every 0.2 s), not at the plan timeout (30 s here).
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (cluster.Status().saves_in_flight() > 0 && absl::Now() < until) {
    }
    CHECK(cluster.Status().saves_in_flight() == 0);
    // Both hosts' plans for the step then meet in a save of their own.
    std::vector<grpc::Status> answers(2);
    std::thread other([&] { answers[1] = Send(*stub, SavePlan("h1", 2, {1})); });
    answers[0] = Send(*stub, SavePlan("h0", 2, {0}));
    other.join();
    for (const grpc::Status& s : answers) {
      INFO(s.error_message());
      CHECK(s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED);
      CHECK(!absl::StrContains(s.error_message(), "twice"));
    }
  }

  // Whatever came before, the cluster saves and loads a job over its hosts.
  RequireAllOk(cluster.RunRanks("job", "save", {2, 2}, 1));
  RequireAllOk(cluster.RunRanks("job", "load", {2, 2}, -1, 4));
}

}  // namespace
}  // namespace ckpt::testing

namespace ckpt::testing {
namespace {

// The calls only node daemons make (issue "Jobs spread over hosts"): a
// heartbeat's carried jobs, a spread step's copy to storage, a verify
// report. With no token or the read-only token each is refused; with the
// cluster's admin token but an unregistered host, too; and a heartbeat
// carrying a million ranks is kept bounded.
TEST_CASE("Host-only coordinator calls want the admin token and a live host", "[multi_host]") {
  TestCluster cluster;
  REQUIRE(cluster
              .Start(2, {"--memory_tier_bytes=67108864"},
                     {"--memory_tier_bytes=67108864", "--memory_tier_replicas=1"})
              .ok());
  TestDaemon& coordinator = cluster.coordinator();
  const std::string read = TestDaemon::ReadToken(coordinator.read_token_file());

  for (const std::string& token : {std::string("none"), read}) {
    INFO("token " << (token == "none" ? "none" : "read-only"));
    const auto channel = Channel(coordinator, token);
    auto persist = v1::SpreadPersistService::NewStub(channel);
    v1::SpreadPersistOpen open;
    open.mutable_host()->set_host("h0");
    grpc::ClientContext open_context;
    Deadline(open_context);
    v1::SpreadPersistDir dir;
    const grpc::Status opened = persist->OpenPersist(&open_context, open, &dir);
    CHECK((opened.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
           opened.error_code() == grpc::StatusCode::PERMISSION_DENIED));
    v1::SpreadPersistCopied copied;
    copied.mutable_host()->set_host("h0");
    grpc::ClientContext copied_context;
    Deadline(copied_context);
    v1::SpreadPersistResult result;
    const grpc::Status reported = persist->ReportPersistCopied(&copied_context, copied, &result);
    CHECK((reported.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
           reported.error_code() == grpc::StatusCode::PERMISSION_DENIED));

    auto coord = v1::CoordinatorService::NewStub(channel);
    v1::HostVerifyReport verify;
    verify.mutable_host()->set_host("h0");
    grpc::ClientContext verify_context;
    Deadline(verify_context);
    v1::ReportVerifyResponse verified;
    const grpc::Status verify_status = coord->ReportVerify(&verify_context, verify, &verified);
    CHECK((verify_status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
           verify_status.error_code() == grpc::StatusCode::PERMISSION_DENIED));

    auto registry = v1::ClusterService::NewStub(channel);
    v1::HeartbeatRequest beat;
    beat.set_host("h0");
    beat.add_jobs()->set_job("job");
    grpc::ClientContext beat_context;
    Deadline(beat_context);
    v1::HeartbeatResponse answer;
    const grpc::Status heard = registry->Heartbeat(&beat_context, beat, &answer);
    CHECK((heard.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
           heard.error_code() == grpc::StatusCode::PERMISSION_DENIED));
  }

  // The admin token, for a host that never registered.
  auto persist = v1::SpreadPersistService::NewStub(Channel(coordinator, ""));
  v1::SpreadPersistOpen open;
  open.mutable_host()->set_host("stranger");
  grpc::ClientContext open_context;
  Deadline(open_context);
  v1::SpreadPersistDir dir;
  const grpc::Status stranger = persist->OpenPersist(&open_context, open, &dir);
  CHECK(stranger.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(absl::StrContains(stranger.error_message(), "host stranger is not registered"));

  // A live host's heartbeat carrying 1000 jobs of 1000 ranks each: kept
  // to 64 jobs and 4096 ranks.
  const v1::ClusterStatusResponse status = cluster.Status();
  REQUIRE(status.hosts_size() == 2);
  auto registry = v1::ClusterService::NewStub(Channel(coordinator, ""));
  v1::HeartbeatRequest beat;
  beat.set_host(status.hosts(0).host().host());
  beat.set_instance(status.hosts(0).instance());
  for (int j = 0; j < 1000; ++j) {
    v1::CarriedJob* job = beat.add_jobs();
    job->set_job("job" + std::to_string(j));
    job->set_world_size(100000);
    for (int r = 0; r < 1000; ++r) job->add_ranks(static_cast<uint32_t>(r));
  }
  grpc::ClientContext beat_context;
  Deadline(beat_context);
  v1::HeartbeatResponse answer;
  REQUIRE(registry->Heartbeat(&beat_context, beat, &answer).ok());
  int jobs = 0;
  int ranks = 0;
  const v1::ClusterStatusResponse kept = cluster.Status();
  for (const v1::ClusterHost& host : kept.hosts()) {
    for (const v1::CarriedJob& job : host.jobs()) {
      ++jobs;
      ranks += job.ranks_size();
    }
  }
  CHECK(jobs <= 64);
  CHECK(ranks <= 4096);
}

}  // namespace
}  // namespace ckpt::testing
