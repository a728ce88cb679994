#include "tools/ckptctl/cluster.h"

#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckpt::ctl {
namespace {

// "ranks 6, 7 of job J (world 8)", the first 16 ranks named.
std::string DescribeCarried(const v1::CarriedJob& job) {
  constexpr int kNamed = 16;
  std::string ranks;
  for (int i = 0; i < job.ranks_size() && i < kNamed; ++i) {
    absl::StrAppend(&ranks, i == 0 ? "" : ", ", job.ranks(i));
  }
  if (job.ranks_size() > kNamed)
    absl::StrAppend(&ranks, " and ", job.ranks_size() - kNamed, " more");
  return absl::StrCat("ranks ", ranks, " of job ", job.job(), " (world ", job.world_size(), ")");
}

// Failover through etcd: who leads, who stands by, and etcd's members.
void PrintElection(std::ostream& out, const v1::CoordinatorElection& e) {
  out << absl::StrFormat("  election: this coordinator (%s) is %s; leader %s, epoch %d\n", e.self(),
                         e.leading() ? "the LEADER" : "a standby",
                         e.leader().empty() ? "none" : e.leader(), e.epoch());
  if (!e.etcd_error().empty()) out << "  etcd: " << e.etcd_error() << "\n";
  out << absl::StrFormat(
      "  elections won %d, leases lost %d, commits fenced %d (here, since it started)\n",
      e.elections_won(), e.leases_lost(), e.fenced_commits());
  for (const v1::CoordinatorElection::Candidate& c : e.candidates()) {
    out << absl::StrFormat("    candidate %-24s campaign revision %d%s\n", c.address(),
                           c.revision(), c.address() == e.leader() ? "  (leads)" : "");
  }
  for (const v1::CoordinatorElection::Member& m : e.etcd()) {
    out << absl::StrFormat("    etcd %-24s %s\n", m.endpoint(),
                           m.healthy() ? absl::StrCat("healthy, etcd ", m.version(),
                                                      m.raft_leader() ? ", raft leader" : "")
                                       : absl::StrCat("UNHEALTHY: ", m.error()));
  }
}

}  // namespace

int RunCluster(const Call& call, v1::ClusterService::StubInterface& stub, bool json) {
  v1::ClusterStatusRequest request;
  v1::ClusterStatusResponse response;
  const grpc::Status rpc = InvokeRpc(call, [&](grpc::ClientContext* context) {
    return stub.ClusterStatus(context, request, &response);
  });
  if (rpc.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    return FailedRpc(call, "cluster",
                     grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                  call.target + " is not a coordinator (ckptd --coordinator)"));
  }
  if (!rpc.ok()) return FailedRpc(call, "cluster", rpc);
  if (json) return PrintMessageJson(call, "cluster", response);
  std::ostream& out = *call.out;
  int lost = 0;
  for (const v1::ClusterHost& h : response.hosts()) lost += h.lost() ? 1 : 0;
  out << absl::StrFormat("coordinator %s: %d hosts, %d lost (heartbeat timeout %.1f s)\n",
                         response.coordinator_instance(), response.hosts_size(), lost,
                         response.heartbeat_timeout_s());
  out << absl::StrFormat("  plans: %d from the plan cache, %d hosts went on without the barrier\n",
                         response.plan_cache_hits(), response.plan_barrier_skips());
  if (response.election().enabled()) PrintElection(out, response.election());
  if (response.hosts().empty()) return kExitOk;
  out << absl::StrFormat("  %-24s %-6s %9s %-12s %-21s %s\n", "HOST", "STATE", "HEARTBEAT",
                         "DOMAIN", "POOL USED", "IN FLIGHT");
  for (const v1::ClusterHost& h : response.hosts()) {
    out << absl::StrFormat(
        "  %-24s %-6s %8.1fs %-12s %-21s %d\n", h.host().host(), h.lost() ? "LOST" : "alive",
        h.heartbeat_age_s(), h.failure_domain().empty() ? "-" : h.failure_domain(),
        absl::StrCat(FormatBytes(h.pool_used()), " / ", FormatBytes(h.pool_bytes())), h.sessions());
    // Each host's saves and loads with their progress, as its last
    // heartbeat reported them.
    for (const v1::SaveProgress& save : h.saves()) out << "    " << DescribeSave(save) << "\n";
    for (const v1::LoadProgress& load : h.loads()) out << "    " << DescribeLoad(load) << "\n";
    // The ranks of spread jobs it carries: what fails at once if it is lost.
    for (const v1::CarriedJob& job : h.jobs()) out << "    " << DescribeCarried(job) << "\n";
  }
  return kExitOk;
}

}  // namespace ckpt::ctl
