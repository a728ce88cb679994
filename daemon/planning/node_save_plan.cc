#include "daemon/planning/node_save_plan.h"

#include "absl/strings/str_cat.h"
#include "proto/lib/align.h"
#include "proto/lib/compact_plan.h"

namespace ckpt::planning {

v1::NodeSavePlan BatchRankPlans(const v1::HostIdentity& host, const std::string& job, int64_t step,
                                int world_size, int writer_threads, const RankRequests& requests) {
  v1::NodeSavePlan plan;
  *plan.mutable_host() = host;
  plan.set_job(job);
  plan.set_step(step);
  plan.set_world_size(world_size);
  plan.set_writer_threads(writer_threads);
  CompactShardsBuilder compact(plan);
  for (const auto& [r, request_ptr] : requests) {
    const v1::PlanSaveRequest& request = *request_ptr;
    if (plan.ranks_size() == 0) plan.set_partial(request.partial());
    v1::RankSavePlan* rank = plan.add_ranks();
    rank->set_rank(r);
    compact.AddShards(request.shards(), *rank);  // device buffers were checked on arrival
    *rank->mutable_objects() = request.objects();
    for (const auto& [k, v] : request.user_metadata()) (*plan.mutable_user_metadata())[k] = v;
  }
  return plan;
}

absl::StatusOr<std::map<int, RankItems>> SplitByRank(const v1::HostAssignment& host,
                                                     const RankRequests& requests,
                                                     uint64_t alignment) {
  std::map<int, RankItems> out;
  for (const auto& [r, request] : requests) out[r];
  for (const v1::WriteItem& write : host.items()) {
    auto found = requests.find(write.rank());
    if (found == requests.end()) {
      return absl::InternalError(absl::StrCat("the assignment names rank ", write.rank(),
                                              ", which is not one of the ", requests.size(),
                                              " ranks on this host"));
    }
    const v1::PlanSaveRequest& request = *found->second;
    const int listed = write.is_object() ? request.objects_size() : request.shards_size();
    if (write.index() >= static_cast<uint32_t>(listed)) {
      return absl::InternalError(
          absl::StrCat("the assignment names ", write.is_object() ? "object " : "shard ",
                       write.index(), " of rank ", write.rank(), ", which lists ", listed));
    }
    if (write.writer() < 0 || write.writer() >= host.files_size()) {
      return absl::InternalError(absl::StrCat("the assignment names writer ", write.writer(),
                                              " of ", host.files_size(), " files"));
    }
    v1::SaveItem item;
    item.set_kind(write.is_object() ? v1::SaveItem::OBJECT : v1::SaveItem::SHARD);
    item.set_index(write.index());
    item.set_bytes(write.bytes());
    item.set_padded_bytes(AlignUp(write.bytes(), alignment));
    RankItems& rank = out[write.rank()];
    rank.items.push_back(item);
    rank.writes.push_back(&write);
  }
  return out;
}

uint64_t HostAssignmentBytes(const v1::HostAssignment& host) {
  uint64_t total = 0;
  for (const v1::WriteItem& write : host.items()) {
    if (write.bytes() > UINT64_MAX - total) return UINT64_MAX;
    total += write.bytes();
  }
  return total;
}

}  // namespace ckpt::planning
