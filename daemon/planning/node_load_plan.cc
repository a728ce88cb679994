#include "daemon/planning/node_load_plan.h"

#include "proto/lib/compact_plan.h"

namespace ckpt::planning {

v1::NodeLoadPlan BatchLoadRequests(const v1::HostIdentity& host, const std::string& job,
                                   int64_t step, const LoadRequests& ranks) {
  v1::NodeLoadPlan plan;
  *plan.mutable_host() = host;
  plan.set_job(job);
  plan.set_step(step);
  plan.set_tier(ranks.empty() ? v1::LOAD_TIER_ANY : ranks.begin()->second->tier());
  CompactShardsBuilder compact(plan);
  for (const auto& [r, request] : ranks) {
    v1::NodeLoadPlan::RankRequests* rank = plan.add_ranks();
    rank->set_rank(r);
    compact.AddRequests(request->tensors(), *rank);
    *rank->mutable_object_keys() = request->object_keys();
  }
  return plan;
}

}  // namespace ckpt::planning
