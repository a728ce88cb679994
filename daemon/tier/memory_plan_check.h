// The node's checks of the memory-tier parts of a coordinator's plans
// (coordinator.proto ReplicaPlan, ErasurePlan, ErasureRebuild) before it
// allocates or connects anything for them, and the room they take. Pure;
// the fuzzers run them (tests/fuzz/fuzz_memory_plans.cc).
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_TIER_MEMORY_PLAN_CHECK_H_
#define CKPT_DAEMON_TIER_MEMORY_PLAN_CHECK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "ckpt/v1/coordinator.pb.h"

namespace ckpt::tier {

// The largest piece accepted from a coordinator's plan.
inline constexpr uint64_t kMaxReplicaPieceBytes = uint64_t{64} << 20;

// INVALID_ARGUMENT when a replica plan cannot be followed safely: a piece
// size of 0 or above kMaxReplicaPieceBytes, a secret of the wrong size, a
// file name that is not data/<name> (confined to the step's directory), or
// more bytes to receive than `max_receive_bytes` (the room the save holds).
absl::Status CheckReplicaPlan(const v1::ReplicaPlan& plan, uint64_t max_receive_bytes);

// The bytes plan.receive_from brings, each file rounded up to `block`
// (saturating).
uint64_t ReplicaBytesToReceive(const v1::ReplicaPlan& plan, uint64_t block);

// INVALID_ARGUMENT naming what is wrong with a coordinator's stripes: k, m
// out of range, pieces over 64 MiB, a bad secret, a stripe without k+m
// shares or numbered 4096 or above, a file name outside data/ and
// parity/, a share's range outside its files or longer than its stripe's
// unit.
absl::Status CheckStripes(uint32_t k, uint32_t m, uint64_t piece_bytes, const std::string& secret,
                          const google::protobuf::RepeatedPtrField<v1::ErasureStripe>& stripes);

// The same checks of a rebuild's stripes (its sources and lost shares are
// checked where they are used, erasure_transfer.h RunRebuild).
absl::Status CheckRebuild(const v1::ErasureRebuild& rebuild);

// The parity bytes `host` keeps of the plan, each file rounded up to
// `block` (saturating).
uint64_t ParityBytesToHold(const v1::ErasurePlan& plan, const std::string& host, uint64_t block);

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_MEMORY_PLAN_CHECK_H_
