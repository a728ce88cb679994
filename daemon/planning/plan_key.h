// The key the save plan cache compares plans by: a SHA-256 digest of every
// field of the hosts' plans but the step and the user metadata, each
// integer as a varint and each string and list behind its length, so the
// encoding is unambiguous. A cluster's plan is millions of shards: its
// encoding kept whole was a gigabyte (5 s to fault in at 8 million
// shards); the digest is 32 bytes, and SHA-256 collisions are found
// neither by chance nor by construction, so equal digests are equal plans
// (the reason a weaker, faster hash is not used).
//
// A plan arrives host by host: the coordinator digests each host's plan as
// it comes (HostPlanKey, also what a known layout compares that host by),
// and the plans' key digests those, so nothing is digested twice and the
// barrier's cache lookup digests 32 bytes per host, not the whole plan.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_PLANNING_PLAN_KEY_H_
#define CKPT_DAEMON_PLANNING_PLAN_KEY_H_

#include <string>

#include "absl/types/span.h"
#include "ckpt/v1/coordinator.pb.h"

namespace ckpt::planning {

// One host's plan's key.
std::string HostPlanKey(const v1::NodeSavePlan& node);

// The plans' key from their hosts' keys, given in the plans' order. Equal
// plans give equal keys; different plans, different keys. Empty if OpenSSL
// failed (out of memory) or a host's key is empty: such a key is never
// looked up.
std::string PlanKeyOfHosts(absl::Span<const std::string> host_keys);

// PlanKeyOfHosts of each plan's HostPlanKey.
std::string PlanKey(absl::Span<const v1::NodeSavePlan> nodes);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_PLAN_KEY_H_
