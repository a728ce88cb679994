// A node's load plan: its ranks' load requests as the one NodeLoadPlan the
// planner takes (coordinator.proto), as LoadSession sends it and the
// fuzzers build it. Pure.
#ifndef CKPT_DAEMON_PLANNING_NODE_LOAD_PLAN_H_
#define CKPT_DAEMON_PLANNING_NODE_LOAD_PLAN_H_

#include <cstdint>
#include <map>
#include <string>

#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/node.pb.h"

namespace ckpt::planning {

// This host's ranks' requests, by rank; each passed ValidateLoadRequest
// (NodeService checks it as it arrives).
using LoadRequests = std::map<int, const v1::LoadRequest*>;

// Shards compacted (device buffers included), each rank's object keys, and
// the lowest rank's tier, which is the load's. Only this host's ranks: the
// hosts of a job spread over hosts plan their own.
v1::NodeLoadPlan BatchLoadRequests(const v1::HostIdentity& host, const std::string& job,
                                   int64_t step, const LoadRequests& ranks);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_NODE_LOAD_PLAN_H_
