#include "daemon/service/cluster_verify.h"

#include <map>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/coordinator/partial_dir.h"
#include "daemon/tier/held_files_verify.h"
#include "daemon/tier/spread_verify.h"

namespace ckpt::service {
namespace {

// How long a host that took its order may take to report.
constexpr absl::Duration kVerifyReportTime = absl::Minutes(10);

}  // namespace

absl::Status VerifySpreadMemoryStep(session::NodeContext& context, const std::string& job,
                                    int64_t step, const std::string& caller,
                                    const std::function<bool()>& gone,
                                    v1::VerifyCheckpointResponse* response) {
  tier::MemoryTier& memory = *context.memory_tier;
  coordinator::Catalog& catalog = memory.coordinator().catalog();
  absl::StatusOr<v1::CheckpointManifest> manifest = catalog.ReadManifest(job, step);
  if (!manifest.ok()) return manifest.status();
  // Erasure-coded steps keep their stripes beside the MANIFEST.
  std::optional<v1::ErasurePlan> stripes;
  absl::StatusOr<std::string> layout = catalog.ReadStepFile(job, step, coordinator::kErasureFile,
                                                            catalog.limits().max_manifest_bytes);
  if (layout.ok()) {
    stripes.emplace();
    if (!stripes->ParseFromString(*layout)) {
      return absl::DataLossError(absl::StrCat("step ", step, " of job ", job,
                                              " in the memory tier: its ERASURE file is corrupt"));
    }
  }
  const v1::ErasurePlan* plan = stripes.has_value() ? &*stripes : nullptr;

  std::map<std::string, std::string> domains;
  std::vector<std::string> live;
  std::map<std::string, tier::HostAnswer> answers;
  const v1::ClusterStatusResponse registry = context.cluster->Registry();
  for (const v1::ClusterHost& host : registry.hosts()) {
    domains[host.host().host()] = host.failure_domain();
    if (!host.lost()) {
      live.push_back(host.host().host());
    } else {
      answers[host.host().host()].why = "lost: no heartbeat within the timeout";
    }
  }
  std::map<std::string, v1::VerifyOrder> orders = tier::VerifyOrders(0, job, step, live, plan);
  absl::StatusOr<uint64_t> round = context.verify_rounds->Start(orders, caller);
  if (!round.ok()) return round.status();
  // This daemon holds files too when ranks of the job attached here.
  const std::string self = context.options.host_name;
  if (!orders.contains(self)) {
    v1::VerifyOrder own = tier::VerifyOrders(*round, job, step, {self}, plan)[self];
    tier::HostAnswer& answer = answers[self];
    answer.report = tier::VerifyHeldFiles(memory, own, self);
    answer.reached = true;
    domains.emplace(self, context.options.failure_domain);
  }
  // A live host takes its order within a heartbeat interval; one that has
  // not by the heartbeat timeout is as good as lost.
  const absl::Time pick_up_by =
      absl::Now() + context.cluster->heartbeat_timeout() + context.cluster->heartbeat_interval();
  // A host checks what it holds at memory speed; its one report may still
  // be lost on the way: the round ends without it after this.
  const absl::Time answer_by = pick_up_by + kVerifyReportTime;
  for (auto& [host, outcome] : context.verify_rounds->Await(
           *round, [&](const std::string& h) { return context.cluster->HostLive(h); }, pick_up_by,
           answer_by, gone)) {
    tier::HostAnswer& answer = answers[host];
    answer.reached = outcome.reported;
    answer.why = std::move(outcome.why);
    answer.report = std::move(outcome.report);
  }
  const tier::SpreadVerdict verdict = tier::JudgeSpreadVerify(
      *manifest, plan, context.options.memory_tier_replicas, domains, answers);
  if (!verdict.problems.empty()) {
    bool only_unreached = true;
    for (const std::string& p : verdict.problems) {
      only_unreached = only_unreached && absl::StrContains(p, ": unreachable (");
    }
    std::vector<std::string> lines(
        verdict.problems.begin(),
        verdict.problems.begin() + std::min<size_t>(verdict.problems.size(), kMaxProblemLines));
    if (verdict.problems.size() > lines.size()) {
      lines.push_back(absl::StrCat("... and ", verdict.problems.size() - lines.size(), " more"));
    }
    const std::string message =
        absl::StrCat("step ", manifest->step(), " of job ", job,
                     " in the memory tier, spread over hosts: ", verdict.problems.size(),
                     " problem(s):\n", absl::StrJoin(lines, "\n"));
    return only_unreached ? absl::FailedPreconditionError(message) : absl::DataLossError(message);
  }
  response->set_chunks_checked(response->chunks_checked() + verdict.chunks);
  response->set_bytes_checked(response->bytes_checked() + verdict.bytes);
  for (const auto& host : verdict.hosts) *response->add_hosts() = host;
  return absl::OkStatus();
}

}  // namespace ckpt::service
