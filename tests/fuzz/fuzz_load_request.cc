// Fuzz target: a load as the ranks send it (LoadCase: a save committed as
// its SaveCase describes, then the loading ranks' AttachRequest and
// LoadRequests, in another world size), through the daemon's request
// validation and, when that passes, the load planner and the pool groups the
// daemon reads and hands out. What is checked: fuzz_support.h.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "proto/lib/request_limits.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ckpt::fuzz::Init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckpt;  // NOLINT
  fuzz::LoadCase load;
  if (!load.ParseFromArray(data, static_cast<int>(size))) return 0;
  std::vector<v1::PlanSaveRequest> requests;
  absl::StatusOr<v1::SaveAssignment> saved = fuzz::PlanSaveCase(load.save(), &requests);
  if (!saved.ok()) return 0;
  const v1::CheckpointManifest manifest = fuzz::CheckSaveAssignment(*saved, requests);

  // The loading ranks attach to the saved job; a load of another job or
  // step finds nothing, which the catalog answers before any planning.
  v1::AttachRequest attach = load.load_attach();
  attach.set_job(manifest.job());
  const RequestLimits limits;
  if (!ValidateAttachRequest(attach, limits).ok()) return 0;
  const int world = attach.world_size();
  if (world > fuzz::kMaxFuzzWorld) return 0;
  std::vector<v1::LoadRequest> ranks(world);
  for (int r = 0; r < world; ++r) {
    attach.set_rank(r);
    if (!ValidateAttachRequest(attach, limits).ok()) return 0;
    if (r < load.ranks_size()) ranks[r] = load.ranks(r);
    // One load session per (job, step): every rank takes rank 0's step.
    ranks[r].set_step(ranks[0].step());
  }
  if (ranks[0].step() != -1 && ranks[0].step() != manifest.step()) return 0;
  absl::StatusOr<v1::LoadAssignment> plan = fuzz::PlanLoadRequests(manifest, ranks);
  if (plan.ok()) fuzz::CheckLoadAssignment(*plan, ranks);
  return 0;
}
