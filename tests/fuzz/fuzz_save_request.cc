// Fuzz target: a save as the ranks send it (SaveCase: the AttachRequest and
// each rank's PlanSaveRequest), through the daemon's request validation and,
// when that passes, the save planner, the manifest the commit writes and the
// pool batches the ranks copy through. What is checked: fuzz_support.h.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ckpt::fuzz::Init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckpt::fuzz::SaveCase save;
  if (!save.ParseFromArray(data, static_cast<int>(size))) return 0;
  std::vector<ckpt::v1::PlanSaveRequest> requests;
  absl::StatusOr<ckpt::v1::SaveAssignment> assignment = ckpt::fuzz::PlanSaveCase(save, &requests);
  if (assignment.ok()) (void)ckpt::fuzz::CheckSaveAssignment(*assignment, requests);
  return 0;
}
