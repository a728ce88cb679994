// Load planning with resharding (docs/design.md §5).
//
// Every request (fqn, dtype, global shape, region wanted) is intersected
// with the stored shards of the manifest; the resulting byte runs are split
// at chunk boundaries and grouped by chunk, so each stored chunk that any
// rank of any host needs appears once, with every (rank, request, offset)
// it must be copied to. A host reads each chunk once, verifies its CRC and
// scatters it, however many ranks need it. Ranks that get the very same
// copy (replicas asking for one region at one place of their lists) share
// one CopyRun (more_ranks).
//
// Runs are strided (CopyRun.count, see coordinator.proto): the cost and the
// size of the plan are proportional to the chunks read and the requests'
// geometry, never to a tensor's element count (one column of a tall tensor
// is one CopyRun per chunk). The manifest is untrusted: a stored shard whose
// chunks do not tile its bytes is DATA_LOSS.
//
// Thread-safety: a pure function.
#ifndef CKPT_DAEMON_PLANNING_LOAD_PLANNER_H_
#define CKPT_DAEMON_PLANNING_LOAD_PLANNER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/column_manifest.h"
#include "daemon/planning/global_load.h"
#include "proto/lib/request_limits.h"

namespace ckpt::planning {

// Errors: NOT_FOUND for an unknown tensor or object, INVALID_ARGUMENT for a
// dtype/shape that differs from the stored one or a region out of bounds,
// FAILED_PRECONDITION for a region the checkpoint does not fully hold
// (a partial save), RESOURCE_EXHAUSTED for a request beyond `limits`
// (naming the bound), DATA_LOSS for a stored shard whose chunks do not tile
// its packed bytes. Where each region meets each tensor's chunks is worked
// out on up to `threads` threads (parallel_for.h; 0: the cores it may run on, at most 8); the plan
// is the same on any number.
absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::CheckpointManifest& manifest,
                                            absl::Span<const v1::NodeLoadPlan> nodes,
                                            const RequestLimits& limits, int threads = 0);
// The same plan in the planner's compact form (global_load.h), from the
// manifest in columns (column_manifest.h), which the plan keeps: a
// cluster's load as messages is millions, and the coordinator sends each
// host only its part (load_spread.h).
absl::StatusOr<std::shared_ptr<GlobalLoad>> PlanGlobalLoad(
    std::shared_ptr<const ColumnManifest> manifest, absl::Span<const v1::NodeLoadPlan> nodes,
    const RequestLimits& limits, int threads = 0);
// From a format-1 manifest, put in columns first.
absl::StatusOr<std::shared_ptr<GlobalLoad>> PlanGlobalLoad(const v1::CheckpointManifest& manifest,
                                                           absl::Span<const v1::NodeLoadPlan> nodes,
                                                           const RequestLimits& limits,
                                                           int threads = 0);
// With the default limits.
absl::StatusOr<v1::LoadAssignment> PlanLoad(const v1::CheckpointManifest& manifest,
                                            absl::Span<const v1::NodeLoadPlan> nodes);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_LOAD_PLANNER_H_
