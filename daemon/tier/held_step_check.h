// Before a host offers its memory-tier files to a load spread over hosts
// (NodeLoadPlan.memory_steps), it verifies the step the load will most
// likely take (the one asked for, or its newest) where its files lie, and
// leaves out any file with a chunk that fails its CRC32C: the coordinator
// then plans that file from another host's copy, from parity or from
// storage, and no host reads the bad bytes. Checking before the plan is
// what lets the next source be another host: once planned, every host
// waits for the chunks the plan gave it.
//
// A chunk verified here that the load only forwards is not verified again
// when sent (the receiver checks what arrives; the CPU is the bound of a
// restore from memory); one this host's own ranks copy is verified again
// where it lies just before they do, as any chunk read in place.
#ifndef CKPT_DAEMON_TIER_HELD_STEP_CHECK_H_
#define CKPT_DAEMON_TIER_HELD_STEP_CHECK_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "daemon/tier/file_stamp.h"
#include "daemon/tier/memory_tier.h"

namespace ckpt::tier {

// MemoryTier::HeldSteps: per step, the files held here.
using HeldSteps = std::vector<std::pair<int64_t, std::vector<std::string>>>;

struct HeldStepCheck {
  int64_t step = -1;  // the step checked; -1: none
  // Its files whose every chunk matched, each as it was right before its
  // bytes were read (file_stamp.h).
  std::map<std::string, FileStamp> verified;
  uint64_t bad_chunks = 0;  // chunks of the files set aside (a chunk failed)
};

// What CheckHeldStep does with a file that fails.
enum class BadFiles {
  // Set aside (MemoryTier::SetAside) and removed from `held`: a load
  // spread over hosts then plans it from another copy.
  kSetAside,
  // Only left out of `verified`: a load on one host verifies it where it
  // lies, and takes a bad chunk from storage, as it would without a check.
  kLeaveToLoad,
};

// Checks step `wanted` (-1: the newest held) of `job` over `threads`
// threads, pinned meanwhile; a file with a chunk that fails, or that is
// shorter than its chunks, is handled as `bad` says. A step gone or whose
// manifest cannot be read, and a file that cannot be mapped or stamped
// now, are not checked (the load's own checks stand).
HeldStepCheck CheckHeldStep(tier::MemoryTier& tier, const std::string& job, int64_t wanted,
                            HeldSteps& held, int threads, BadFiles bad = BadFiles::kSetAside);

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_HELD_STEP_CHECK_H_
