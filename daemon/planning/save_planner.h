// Global save planning (docs/design.md §4.2), written once for one host or many.
//
// Input: one NodeSavePlan per host, each batching that host's ranks. The
// planner validates every shard, checks that ranks agree on each tensor's
// dtype and shape, groups identical regions into replicas, rejects distinct
// regions that overlap and (unless the save is partial) tensors the save
// does not cover, then assigns each unique shard to one writer:
//   worst-fit, largest first: to the least-loaded host among those holding a
//   replica, then to its least-loaded rank, then to its least-loaded writer
//   file. Items are laid out in their file back to back, each at a 4 KiB
//   aligned offset so writes can use O_DIRECT.
// The result also carries the manifest the commit will write, with every
// chunk placed and only CRCs missing, except for items of 0 bytes: an empty
// object's chunk (length 0, crc32c 0) is final, nothing is written for it
// and no checksum is reported for it; an empty shard has no chunks. Its
// tensor shards' chunks are cut from their items when the manifest is
// made (planned_manifest.h: ManifestOf), not kept in the plan.
//
// Cost: the request's size, not its tensors' element counts. Shards are
// validated against options.limits (RequestLimits), regions are compared as
// boxes (geometry.h) and only those whose flattened spans meet; the chunks
// the manifest will list are counted against --max_chunks_per_save before
// any is built, and the manifest is checked against what loading accepts.
//
// Thread-safety: a pure function.
#ifndef CKPT_DAEMON_PLANNING_SAVE_PLANNER_H_
#define CKPT_DAEMON_PLANNING_SAVE_PLANNER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/planning/manifest_check.h"
#include "proto/lib/request_limits.h"

namespace ckpt::planning {

class PlanBudget;

struct SavePlannerOptions {
  uint64_t chunk_bytes = 4 << 20;  // unit of checksumming and of writes
  uint64_t alignment = 4096;       // of every item in its file (a power of two)
  RequestLimits limits;            // the daemon's flags
  // What the catalog accepts when it reads a manifest back: a plan whose
  // manifest would break them is refused, never committed unloadable.
  ManifestLimits manifest_limits;
  // Threads for the phases that make a message per item and check the
  // manifest (parallel_for.h; the coordinator's load planning takes the
  // same); 0: the cores this process may run on, at most 8.
  int threads = 0;
  // Planning memory shared with the coordinator's other plans
  // (plan_budget.h): a save the plan cache does not hold reserves its
  // scratch there first, waiting up to budget_wait. Null: unbounded.
  PlanBudget* budget = nullptr;
  absl::Duration budget_wait = absl::Seconds(120);
};

// The manifest, `extra_bytes` larger (what the commit still fills in), is
// within the limits a catalog reads manifests with: its bytes, and its
// footprint while read. RESOURCE_EXHAUSTED naming the limit otherwise.
// Planning checks it with room for the CRCs; the commit again once the
// writers' encodings (docs/compression.md) made it larger.
absl::Status CheckManifestSize(const v1::CheckpointManifest& manifest, uint64_t extra_bytes,
                               const ManifestLimits& limits);

absl::StatusOr<v1::SaveAssignment> PlanSave(absl::Span<const v1::NodeSavePlan> nodes,
                                            const SavePlannerOptions& options);
// The same plan, built on an arena the pointer owns: a cluster's is
// millions of messages, and one heap allocation each (and one free each
// when it is dropped) was a second or more of the plan.
absl::StatusOr<std::shared_ptr<const v1::SaveAssignment>> PlanSaveShared(
    absl::Span<const v1::NodeSavePlan> nodes, const SavePlannerOptions& options);
// The memory an assignment holds: its arena's blocks (PlanSaveShared's,
// two to three times its encoded size), else its own messages'.
uint64_t AssignmentBytes(const v1::SaveAssignment& assignment);

// What PlanSave checks of the first host's plan before anything else: the
// options, the job name, the step, the world size and the user metadata.
absl::Status ValidateSaveHeader(const v1::NodeSavePlan& first, const SavePlannerOptions& options);

// False for chunks whose checksum is final in the plan (0 bytes: CRC32C of
// nothing is 0): the commit fills in reported checksums for the others only.
inline bool SaveChunkNeedsChecksum(const v1::StoredChunk& chunk) { return chunk.length() > 0; }

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_SAVE_PLANNER_H_
