#include "daemon/server/node_save_plan.h"

#include "absl/strings/str_cat.h"
#include "proto/lib/align.h"

namespace ckpt::server {

v1::NodeSavePlan BatchRankPlans(const v1::HostIdentity& host, const std::string& job, int64_t step,
                                int writer_threads,
                                absl::Span<const v1::PlanSaveRequest* const> requests) {
  v1::NodeSavePlan plan;
  *plan.mutable_host() = host;
  plan.set_job(job);
  plan.set_step(step);
  plan.set_world_size(static_cast<int>(requests.size()));
  plan.set_writer_threads(writer_threads);
  for (size_t r = 0; r < requests.size(); ++r) {
    const v1::PlanSaveRequest& request = *requests[r];
    if (r == 0) plan.set_partial(request.partial());
    v1::RankSavePlan* rank = plan.add_ranks();
    rank->set_rank(static_cast<int>(r));
    *rank->mutable_shards() = request.shards();
    *rank->mutable_objects() = request.objects();
    for (const auto& [k, v] : request.user_metadata()) (*plan.mutable_user_metadata())[k] = v;
  }
  return plan;
}

absl::StatusOr<std::vector<RankItems>> SplitByRank(
    const v1::HostAssignment& host, absl::Span<const v1::PlanSaveRequest* const> requests,
    uint64_t alignment) {
  std::vector<RankItems> out(requests.size());
  for (const v1::WriteItem& write : host.items()) {
    if (write.rank() < 0 || static_cast<size_t>(write.rank()) >= requests.size()) {
      return absl::InternalError(absl::StrCat("the assignment names rank ", write.rank(),
                                              " of a world of ", requests.size()));
    }
    const v1::PlanSaveRequest& request = *requests[write.rank()];
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

}  // namespace ckpt::server
