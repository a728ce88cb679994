#include "tests/support/test_cluster.h"

#include <grpcpp/grpcpp.h>

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ckpt/v1/cluster.grpc.pb.h"
#include "tests/catch.h"

namespace ckpt::testing {
namespace {

std::vector<std::string> Joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

absl::Status TestCluster::Start(int hosts, const std::vector<std::string>& node_flags,
                                const std::vector<std::string>& coordinator_flags) {
  coordinator_flags_ =
      Joined({"--coordinator", "--host_name=coordinator", "--heartbeat_interval_s=0.2",
              absl::StrCat("--heartbeat_timeout_s=", kHeartbeatTimeoutS)},
             coordinator_flags);
  if (absl::Status s = coordinator_.StartWithTcp(coordinator_flags_); !s.ok()) return s;
  node_flags_ = node_flags;
  for (int i = 0; i < hosts; ++i) {
    nodes_.push_back(std::make_unique<TestDaemon>());
    if (absl::Status s = nodes_.back()->Start(NodeFlags(i)); !s.ok()) return s;
  }
  if (!AwaitLiveHosts(hosts)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the ", hosts, " nodes did not all register: ", Status().ShortDebugString()));
  }
  return absl::OkStatus();
}

std::vector<std::string> TestCluster::NodeFlags(int i) const {
  return Joined(
      {"--host_name=" + HostName(i), "--storage_root=" + root(),
       "--coordinator_address=" + coordinator_.tcp_address(),
       "--coordinator_tls_ca_file=" + coordinator_.tls_cert_file(),
       "--coordinator_token_file=" + coordinator_.token_file(),
       "--failure_domain=rack" + std::to_string(i), "--heartbeat_interval_s=0.2",
       "--peer_address=127.0.0.1:0", absl::StrCat("--heartbeat_timeout_s=", kHeartbeatTimeoutS)},
      node_flags_);
}

absl::Status TestCluster::RestartNode(int i, const std::vector<std::string>& extra) {
  if (absl::Status s = nodes_[i]->Start(Joined(NodeFlags(i), extra)); !s.ok()) return s;
  // Its earlier instance may still count as alive for a while: this one
  // registers once that one is declared gone.
  if (!nodes_[i]->WaitForOutput("registered with coordinator")) {
    return absl::DeadlineExceededError(absl::StrCat(HostName(i), " did not register again"));
  }
  return absl::OkStatus();
}

absl::Status TestCluster::RestartCoordinator(const std::vector<std::string>& extra) {
  // The same address, certificate and tokens: the nodes find it again.
  return coordinator_.Start(
      Joined(Joined(coordinator_flags_, {"--tls_cert_file=" + coordinator_.tls_cert_file(),
                                         "--tls_key_file=" + coordinator_.tls_key_file(),
                                         "--token_file=" + coordinator_.token_file(),
                                         "--listen_address=" + coordinator_.tcp_address()}),
             extra));
}

v1::ClusterStatusResponse TestCluster::Status() {
  auto stub = v1::ClusterService::NewStub(
      grpc::CreateChannel("unix:" + coordinator_.socket(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ClusterStatusResponse response;
  (void)stub->ClusterStatus(&context, {}, &response);
  return response;
}

bool TestCluster::AwaitLiveHosts(int live) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    int n = 0;
    const v1::ClusterStatusResponse status = Status();
    for (const v1::ClusterHost& h : status.hosts()) n += h.lost() ? 0 : 1;
    if (n == live) return true;
    absl::SleepFor(absl::Milliseconds(20));  // an RPC every 20 ms leaves the daemons the CPU
  }
  return false;
}

std::vector<std::unique_ptr<Subprocess>> TestCluster::StartRanks(
    const std::string& job, const std::string& mode, const std::vector<int>& ranks_per_host,
    int64_t step, int saved_world, int scale, const std::map<int, std::string>& modes,
    const std::vector<std::string>& flags) {
  const int world = std::accumulate(ranks_per_host.begin(), ranks_per_host.end(), 0);
  std::vector<std::unique_ptr<Subprocess>> ranks;
  int rank = 0;
  for (size_t host = 0; host < ranks_per_host.size(); ++host) {
    for (int local = 0; local < ranks_per_host[host]; ++local, ++rank) {
      auto it = modes.find(rank);
      std::vector<std::string> argv = {DemoRankPath(),
                                       "--socket=" + nodes_[host]->socket(),
                                       "--job=" + job,
                                       "--mode=" + (it == modes.end() ? mode : it->second),
                                       absl::StrCat("--rank=", rank),
                                       absl::StrCat("--world=", world),
                                       absl::StrCat("--local_world=", ranks_per_host[host]),
                                       absl::StrCat("--local_rank=", local),
                                       absl::StrCat("--step=", step),
                                       absl::StrCat("--saved_world=", saved_world),
                                       absl::StrCat("--scale=", scale)};
      argv.insert(argv.end(), flags.begin(), flags.end());
      absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv);
      ranks.push_back(p.ok() ? std::move(*p) : nullptr);
    }
  }
  return ranks;
}

std::vector<ExitInfo> TestCluster::RunRanks(const std::string& job, const std::string& mode,
                                            const std::vector<int>& ranks_per_host, int64_t step,
                                            int saved_world, int scale,
                                            const std::vector<std::string>& flags) {
  std::vector<std::unique_ptr<Subprocess>> ranks =
      StartRanks(job, mode, ranks_per_host, step, saved_world, scale, {}, flags);
  std::vector<ExitInfo> out(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r] == nullptr) {
      out[r].output = "could not spawn the rank";
    } else {
      out[r] = ranks[r]->Wait();
    }
  }
  return out;
}

void RequireAllOk(const std::vector<ExitInfo>& ranks) {
  std::string all;
  bool ok = true;
  for (size_t r = 0; r < ranks.size(); ++r) {
    all += absl::StrCat("rank ", r, ": ", ranks[r].output, "\n");
    ok = ok && ranks[r].ok();
  }
  INFO(all);
  REQUIRE(ok);
}

}  // namespace ckpt::testing
