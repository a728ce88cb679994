// The node's side of save planning, as pure functions like the
// coordinator's planner: the ranks' requests batched into the one plan the
// node sends (docs/design.md §2: one message per node, not per rank), and this
// host's part of the assignment split into each rank's items. The save
// session keeps the state and the locking around them.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_PLANNING_NODE_SAVE_PLAN_H_
#define CKPT_DAEMON_PLANNING_NODE_SAVE_PLAN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/v1/common.pb.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/node.pb.h"

namespace ckpt::planning {

// The requests of this host's ranks, by rank: all `world_size` ranks of a
// job on one host, or this host's share of a job spread over hosts.
using RankRequests = std::map<int, const v1::PlanSaveRequest*>;

// The save is partial as the lowest rank asked; user metadata is merged, a
// higher rank's value winning for a key two ranks set. The shards are in
// the compact form (coordinator.proto), without device buffers: the
// requests were validated, buffers included, when they arrived.
v1::NodeSavePlan BatchRankPlans(const v1::HostIdentity& host, const std::string& job, int64_t step,
                                int world_size, int writer_threads, const RankRequests& requests);

// What one rank copies: its items in assignment order, each with the write
// item it comes from (pointing into the HostAssignment given).
struct RankItems {
  std::vector<v1::SaveItem> items;
  std::vector<const v1::WriteItem*> writes;  // parallel to items
};

// One RankItems per request, by rank; padded_bytes is the room an item
// takes at `alignment`. The assignment comes from the coordinator, possibly
// over the network: INTERNAL when a write item names a rank not on this
// host, or a shard, object or writer file that does not exist, rather than
// indexing past them later.
absl::StatusOr<std::map<int, RankItems>> SplitByRank(const v1::HostAssignment& host,
                                                     const RankRequests& requests,
                                                     uint64_t alignment);

// The bytes this host's part of a save puts on storage (its write items;
// what the catalog counts once it commits), saturating at UINT64_MAX: the
// assignment may come over the network.
uint64_t HostAssignmentBytes(const v1::HostAssignment& host);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_NODE_SAVE_PLAN_H_
