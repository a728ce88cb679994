// Named crash points for fault tests. `ckptd --fault_kill_at=NAME` makes the
// daemon SIGKILL itself when execution reaches FaultPoint(NAME), so a test
// kills a real process at an exact protocol step without racing a timer.
// With no point armed, FaultPoint is one relaxed atomic load. Compiled in
// only with CKPT_FAULT_INJECTION (test builds); otherwise both are no-ops
// and ckptd has no --fault_kill_at.
#ifndef CKPT_DAEMON_FAULT_FAULT_POINTS_H_
#define CKPT_DAEMON_FAULT_FAULT_POINTS_H_

#include <string>
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ckpt {

// Arms one point (empty disarms). With a `pause`, reaching it blocks the
// thread that reached it that long instead of killing (ckptd
// --fault_pause_s): a daemon alive but stuck at a protocol step, so a
// test can cut its link there. Not thread-safe against FaultPoint: call
// at start-up.
void ArmFaultPoint(std::string name, absl::Duration pause = absl::ZeroDuration());
void FaultPoint(absl::string_view name);

// Corruption points (ckptd --fault_corrupt_at=NAME): CorruptionPoint(NAME)
// is true where NAME is armed, and its caller then damages what it just
// made (one flipped byte), so a test checks verification and fallback on
// real daemon memory. Always false in a release build.
void ArmCorruptionPoint(std::string name);
bool CorruptionPoint(absl::string_view name);

}  // namespace ckpt

#endif  // CKPT_DAEMON_FAULT_FAULT_POINTS_H_
