// Node daemons and a coordinator daemon, each a real ckptd process: nodes
// register over TCP with TLS and the coordinator's token, heartbeat, are
// declared lost within the heartbeat timeout when killed, register again
// with a restarted coordinator; a node with a wrong token is never listed.
#include <grpcpp/grpcpp.h>

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ckpt/client.h"
#include "ckpt/v1/cluster.grpc.pb.h"
#include "daemon/peer/peer_sender.h"
#include "proto/lib/cluster_protocol.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

constexpr double kTimeoutS = 1.5;

const std::vector<std::string> kCoordinatorFlags = {
    "--coordinator", "--heartbeat_interval_s=0.2",
    absl::StrCat("--heartbeat_timeout_s=", kTimeoutS)};

std::vector<std::string> NodeFlags(const TestDaemon& coordinator, const std::string& host,
                                   const std::string& domain, const std::string& token_file = "") {
  return {
      "--host_name=" + host, "--coordinator_address=" + coordinator.tcp_address(),
      "--coordinator_tls_ca_file=" + coordinator.tls_cert_file(),
      "--coordinator_token_file=" + (token_file.empty() ? coordinator.token_file() : token_file),
      "--failure_domain=" + domain};
}

// The coordinator's view, asked over its Unix socket.
v1::ClusterStatusResponse ClusterStatus(const TestDaemon& coordinator) {
  auto stub = v1::ClusterService::NewStub(
      grpc::CreateChannel("unix:" + coordinator.socket(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ClusterStatusResponse response;
  const grpc::Status status = stub->ClusterStatus(&context, {}, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  return response;
}

const v1::ClusterHost* Find(const v1::ClusterStatusResponse& status, const std::string& host) {
  for (const v1::ClusterHost& h : status.hosts()) {
    if (h.host().host() == host) return &h;
  }
  return nullptr;
}

// Asks again and again (an RPC every 20 ms, leaving the daemons the CPU)
// until `done`; false after 30 s.
template <typename Pred>
bool AwaitCluster(const TestDaemon& coordinator, Pred done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    if (done(ClusterStatus(coordinator))) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST_CASE("Nodes register and heartbeat; a killed one is lost within the timeout", "[cluster]") {
  TestDaemon coordinator;
  REQUIRE(coordinator.StartWithTcp(kCoordinatorFlags).ok());
  TestDaemon a, b;
  REQUIRE(a.Start(NodeFlags(coordinator, "host-a", "rack1")).ok());
  REQUIRE(b.Start(NodeFlags(coordinator, "host-b", "rack2")).ok());
  REQUIRE(a.WaitForOutput("registered with coordinator"));
  REQUIRE(b.WaitForOutput("registered with coordinator"));

  v1::ClusterStatusResponse status = ClusterStatus(coordinator);
  REQUIRE(status.hosts_size() == 2);
  const v1::ClusterHost* host_a = Find(status, "host-a");
  REQUIRE(host_a != nullptr);
  CHECK(!host_a->lost());
  CHECK(host_a->failure_domain() == "rack1");
  CHECK(host_a->pool_bytes() > 0);
  CHECK(host_a->instance().size() > 0);
  CHECK(status.heartbeat_timeout_s() == Approx(kTimeoutS));
  // Heartbeats keep coming: the age stays well under the timeout.
  REQUIRE(AwaitCluster(coordinator, [](const v1::ClusterStatusResponse& s) {
    const v1::ClusterHost* h = Find(s, "host-b");
    return h != nullptr && !h->lost() && h->heartbeat_age_s() < 1.0;
  }));

  // ckptctl shows the same, as a table.
  const ExitInfo shown = coordinator.Ckptctl({"cluster"});
  CHECK(shown.exit_code == 0);
  CHECK_THAT(shown.output, Catch::Contains("host-a") && Catch::Contains("rack2") &&
                               Catch::Contains("2 hosts, 0 lost"));

  // SIGKILL one node: the coordinator declares it lost within the timeout
  // (plus its sweep), names it, and keeps the other.
  b.Kill();
  const absl::Time killed = absl::Now();
  REQUIRE(coordinator.WaitForOutput("host host-b lost", absl::Seconds(15)));
  CHECK(absl::Now() - killed < absl::Seconds(kTimeoutS + 2));
  status = ClusterStatus(coordinator);
  REQUIRE(Find(status, "host-b") != nullptr);
  CHECK(Find(status, "host-b")->lost());
  CHECK(!Find(status, "host-a")->lost());

  // A restarted node registers again with a new instance.
  const std::string old_instance = Find(status, "host-b")->instance();
  REQUIRE(b.Start(NodeFlags(coordinator, "host-b", "rack2")).ok());
  REQUIRE(AwaitCluster(coordinator, [&](const v1::ClusterStatusResponse& s) {
    const v1::ClusterHost* h = Find(s, "host-b");
    return h != nullptr && !h->lost() && h->instance() != old_instance;
  }));

  // A restarted coordinator knows no one: heartbeats are told to register
  // again, and both hosts come back.
  const std::string address = coordinator.tcp_address();
  coordinator.Kill();
  std::vector<std::string> flags = kCoordinatorFlags;
  flags.insert(flags.end(),
               {"--tls_cert_file=" + coordinator.tls_cert_file(),
                "--tls_key_file=" + coordinator.tls_key_file(),
                "--token_file=" + coordinator.token_file(), "--listen_address=" + address});
  REQUIRE(coordinator.Start(flags).ok());
  REQUIRE(AwaitCluster(coordinator, [](const v1::ClusterStatusResponse& s) {
    return s.hosts_size() == 2 && !Find(s, "host-a")->lost() && !Find(s, "host-b")->lost();
  }));
  CHECK(a.WaitForOutput("registering again"));
}

TEST_CASE("A node's peer channel is registered, and refuses senders without a token", "[cluster]") {
  TestDaemon coordinator;
  REQUIRE(coordinator.StartWithTcp(kCoordinatorFlags).ok());
  TestDaemon node;
  std::vector<std::string> flags = NodeFlags(coordinator, "host-p", "rack1");
  flags.push_back("--peer_address=127.0.0.1:0");
  REQUIRE(node.Start(flags).ok());
  REQUIRE(node.WaitForOutput("registered with coordinator"));
  const v1::ClusterHost* host = nullptr;
  v1::ClusterStatusResponse status;
  REQUIRE(AwaitCluster(coordinator, [&](const v1::ClusterStatusResponse& s) {
    status = s;
    host = Find(status, "host-p");
    return host != nullptr;
  }));
  const std::string address = host->host().address();
  INFO("registered peer address " << address);
  REQUIRE(address.rfind("127.0.0.1:", 0) == 0);
  REQUIRE(address != "127.0.0.1:0");

  // A sender with a made-up token is refused; the daemon goes on serving.
  std::vector<char> bytes(4096, 'x');
  const peer::PeerBlockRef block{0, bytes.data(), bytes.size()};
  const absl::Status refused = peer::PeerSend(address, peer::PeerToken{}, {&block, 1});
  CHECK(refused.code() == absl::StatusCode::kPermissionDenied);
  CHECK(node.Status().pool_bytes() > 0);
  SaveStep(node, "after-peer", 1);
}

TEST_CASE("ckptctl cluster shows each host's saves in flight with their progress", "[cluster]") {
  TestDaemon coordinator;
  REQUIRE(coordinator.StartWithTcp(kCoordinatorFlags).ok());
  TestDaemon node;
  std::vector<std::string> flags = NodeFlags(coordinator, "host-s", "rack1");
  // The save stops once planned (its handler paused): in flight on host-s
  // until the node is killed.
  flags.insert(flags.end(), {"--fault_kill_at=save.planned", "--fault_pause_s=300"});
  REQUIRE(node.Start(flags).ok());
  REQUIRE(node.WaitForOutput("registered with coordinator"));
  std::vector<char> bytes(1 << 20, 'x');
  std::thread saver([&] {
    ClientOptions options;
    options.socket_path = node.socket();
    options.job = "shown";
    auto client = Client::Attach(options);
    if (!client.ok()) return;
    HostTensor t;
    t.fqn = "model.w";
    t.dtype = DType::kUInt8;
    t.global_shape = {static_cast<int64_t>(bytes.size())};
    t.data = bytes.data();
    (void)(*client)->Save(7, {t}, {});  // fails when the node is killed
  });
  REQUIRE(node.WaitForOutput("fault point save.planned reached"));
  v1::ClusterStatusResponse status;
  REQUIRE(AwaitCluster(coordinator, [&](const v1::ClusterStatusResponse& s) {
    status = s;
    const v1::ClusterHost* h = Find(status, "host-s");
    return h != nullptr && h->saves_size() == 1;
  }));
  const v1::SaveProgress& save = Find(status, "host-s")->saves(0);
  CHECK(save.job() == "shown");
  CHECK(save.step() == 7);
  CHECK(save.phase() == "snapshot");
  CHECK(save.world_size() == 1);
  CHECK(Find(status, "host-s")->sessions() == 1);
  const ExitInfo shown = coordinator.Ckptctl({"cluster"});
  CHECK(shown.exit_code == 0);
  CHECK_THAT(shown.output, Catch::Contains("save job shown step 7: snapshot"));
  node.Kill();
  saver.join();
}

TEST_CASE("A node with a wrong token is refused and never listed", "[cluster]") {
  TestDaemon coordinator;
  REQUIRE(coordinator.StartWithTcp(kCoordinatorFlags).ok());
  TestDaemon intruder;
  const std::string wrong = intruder.dir() + "/wrong.token";
  { std::ofstream(wrong) << "not-the-cluster-token-0123456789\n"; }
  REQUIRE(::chmod(wrong.c_str(), 0600) == 0);
  // The read-only token is not enough to register either.
  TestDaemon reader;
  REQUIRE(intruder.Start(NodeFlags(coordinator, "intruder", "rack9", wrong)).ok());
  REQUIRE(
      reader.Start(NodeFlags(coordinator, "reader", "rack9", coordinator.read_token_file())).ok());
  CHECK(intruder.WaitForOutput("UNAUTHENTICATED"));
  CHECK(reader.WaitForOutput("PERMISSION_DENIED"));
  CHECK(ClusterStatus(coordinator).hosts_size() == 0);
}

TEST_CASE("A daemon that is not a coordinator says so to ckptctl cluster", "[cluster]") {
  TestDaemon plain;
  REQUIRE(plain.Start().ok());
  const ExitInfo shown = plain.Ckptctl({"cluster"});
  CHECK(shown.exit_code == 1);
  CHECK_THAT(shown.output, Catch::Contains("not a coordinator"));
}

}  // namespace
}  // namespace ckpt::testing

namespace ckpt::testing {
namespace {

TEST_CASE("Registration exchanges protocol versions; one the coordinator cannot serve is refused",
          "[cluster][protocol]") {
  TestDaemon coordinator;
  REQUIRE(coordinator.StartWithTcp(kCoordinatorFlags).ok());
  auto stub = v1::ClusterService::NewStub(
      grpc::CreateChannel("unix:" + coordinator.socket(), grpc::InsecureChannelCredentials()));
  auto attempt = [&](uint32_t version, v1::RegisterHostResponse* response) {
    v1::RegisterHostRequest request;
    request.mutable_host()->set_host("fake");
    request.set_instance("0123456789abcdef");
    request.set_protocol_version(version);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return stub->Register(&context, request, response);
  };
  v1::RegisterHostResponse response;
  const grpc::Status future = attempt(99, &response);
  CHECK(future.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(future.error_message().find("host fake speaks cluster protocol 99") != std::string::npos);
  CHECK(future.error_message().find(absl::StrCat("versions ", kOldestClusterProtocolVersion, " to ",
                                                 kClusterProtocolVersion)) != std::string::npos);
  CHECK(Find(ClusterStatus(coordinator), "fake") == nullptr);
  // A node from before versions (0) is served, as is this release's.
  for (uint32_t version : {0u, kClusterProtocolVersion}) {
    INFO("version " << version);
    const grpc::Status ok = attempt(version, &response);
    INFO(ok.error_message());
    REQUIRE(ok.ok());
    CHECK(response.protocol_version() == kClusterProtocolVersion);
    CHECK(response.epoch() == 0);  // one coordinator, no election
  }
  CHECK(Find(ClusterStatus(coordinator), "fake") != nullptr);
  CHECK(ClusterStatus(coordinator).protocol_version() == kClusterProtocolVersion);
  CHECK_FALSE(ClusterStatus(coordinator).election().enabled());
}

}  // namespace
}  // namespace ckpt::testing
