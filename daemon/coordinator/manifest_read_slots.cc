#include "daemon/coordinator/manifest_read_slots.h"

namespace ckpt::coordinator {

void ManifestReadSlots::Acquire() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* free) { return *free > 0; }, &free_));
  --free_;
}

void ManifestReadSlots::Release() {
  absl::MutexLock lock(&mu_);
  ++free_;
}

int ManifestReadSlots::free_slots() const {
  absl::MutexLock lock(&mu_);
  return free_;
}

}  // namespace ckpt::coordinator
