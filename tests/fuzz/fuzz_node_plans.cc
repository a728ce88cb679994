// Fuzz target: the hosts' plans of a save as the coordinator receives them
// over the network (ClusterCase: compact or spelled out, from any client),
// through the save planner, then the hosts' plans of a load of the
// manifest that save would commit, through the load planner. What is
// checked of an accepted save: every item names a shard or object its rank
// listed, with that rank on the host that writes it, and items do not
// overlap in their files; of an accepted load: every copy is for a
// request some host's rank made and lies inside its chunk and the
// request's bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/planned_manifest.h"
#include "proto/lib/copy_run.h"
#include "proto/lib/request_limits.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Hosts beyond this only repeat hosts.
constexpr int kMaxFuzzHosts = 8;

void CheckAssignment(const std::vector<ckpt::v1::NodeSavePlan>& hosts,
                     const ckpt::v1::SaveAssignment& assignment) {
  CKPT_FUZZ_CHECK(assignment.hosts_size() == static_cast<int>(hosts.size()),
                  "an assignment for another number of hosts");
  for (int h = 0; h < assignment.hosts_size(); ++h) {
    const ckpt::v1::HostAssignment& part = assignment.hosts(h);
    std::map<int, const ckpt::v1::RankSavePlan*> ranks;
    for (const ckpt::v1::NodeSavePlan& host : hosts) {
      if (host.host().host() != part.host().host()) continue;
      for (const ckpt::v1::RankSavePlan& rank : host.ranks()) ranks[rank.rank()] = &rank;
    }
    std::map<int, std::vector<std::pair<uint64_t, uint64_t>>> extents;  // by writer
    for (const ckpt::v1::WriteItem& item : part.items()) {
      auto rank = ranks.find(item.rank());
      CKPT_FUZZ_CHECK(rank != ranks.end(),
                      absl::StrCat("item of rank ", item.rank(), ", not on its host"));
      const int listed = item.is_object() ? rank->second->objects_size()
                                          : std::max(rank->second->shards_size(),
                                                     rank->second->shard_tensors_size());
      CKPT_FUZZ_CHECK(item.index() < static_cast<uint32_t>(listed),
                      absl::StrCat("item ", item.index(), " of a rank that lists ", listed));
      CKPT_FUZZ_CHECK(item.writer() >= 0 && item.writer() < part.files_size(),
                      "item of a writer the host does not have");
      extents[item.writer()].push_back({item.file_offset(), item.bytes()});
    }
    for (auto& [writer, list] : extents) {
      std::sort(list.begin(), list.end());
      for (size_t i = 1; i < list.size(); ++i) {
        CKPT_FUZZ_CHECK(list[i - 1].first + list[i - 1].second <= list[i].first,
                        absl::StrCat("items overlap in writer ", writer, "'s file"));
      }
    }
  }
}

void CheckLoad(const std::vector<ckpt::v1::NodeLoadPlan>& loads,
               const ckpt::v1::LoadAssignment& assignment) {
  std::map<int, std::pair<int, int>> asked;  // by rank: tensors, object keys
  for (const ckpt::v1::NodeLoadPlan& node : loads) {
    for (const ckpt::v1::NodeLoadPlan::RankRequests& rank : node.ranks()) {
      asked[rank.rank()] = {std::max(rank.tensors_size(), rank.request_tensors_size()),
                            rank.object_keys_size()};
    }
  }
  std::map<int, const ckpt::v1::LoadAssignment::RankSizes*> sizes;
  for (const ckpt::v1::LoadAssignment::RankSizes& s : assignment.sizes()) {
    auto rank = asked.find(s.rank());
    CKPT_FUZZ_CHECK(rank != asked.end() && s.tensor_bytes_size() == rank->second.first &&
                        s.object_bytes_size() == rank->second.second,
                    absl::StrCat("sizes of rank ", s.rank(), " do not match its requests"));
    sizes[s.rank()] = &s;
  }
  for (const ckpt::v1::ChunkRead& read : assignment.reads()) {
    for (const ckpt::v1::CopyRun& run : read.runs()) {
      ckpt::ForEachRunRank(run, [&](int rank) {
        auto s = sizes.find(rank);
        CKPT_FUZZ_CHECK(s != sizes.end() &&
                            run.request() < static_cast<uint32_t>(s->second->tensor_bytes_size()),
                        absl::StrCat("run for rank ", rank, " request ", run.request()));
        const absl::Status ok = ckpt::CheckCopyRun(
            run, read.chunk().length(), s->second->tensor_bytes(static_cast<int>(run.request())));
        CKPT_FUZZ_CHECK(ok.ok(), ok.ToString());
      });
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ckpt::fuzz::Init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckpt::fuzz::ClusterCase save;
  if (!save.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (save.hosts_size() == 0 || save.hosts_size() > kMaxFuzzHosts) return 0;
  const std::vector<ckpt::v1::NodeSavePlan> hosts(save.hosts().begin(), save.hosts().end());
  absl::StatusOr<ckpt::v1::SaveAssignment> assignment =
      ckpt::planning::PlanSave(hosts, ckpt::fuzz::DaemonPlannerOptions());
  if (!assignment.ok()) return 0;
  CheckAssignment(hosts, *assignment);
  if (save.loads_size() == 0 || save.loads_size() > kMaxFuzzHosts) return 0;
  const std::vector<ckpt::v1::NodeLoadPlan> loads(save.loads().begin(), save.loads().end());
  absl::StatusOr<ckpt::v1::LoadAssignment> load = ckpt::planning::PlanLoad(
      ckpt::planning::ManifestOf(*assignment), loads, ckpt::RequestLimits());
  if (load.ok()) CheckLoad(loads, *load);
  return 0;
}
