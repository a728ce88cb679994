// One host's part of `ckptctl verify` of a memory-tier step spread over
// hosts (docs/design.md §8): the cluster's coordinator asks every live host
// (coordinator.proto VerifyOrder) to check what it holds of the step, and
// judges the answers together (spread_verify.h).
//
// A host checks every file it holds of the step, its own and the replicas
// it keeps for others alike: each chunk the manifest places in a data file
// against its CRC32C, where it lies (no copy). Parity files have no CRC of
// their own; each share of an erasure stripe this host holds is folded
// instead (the XOR of its kFoldBytes blocks), and the coordinator checks
// the parity shares' folds against the code of the data shares' folds.
//
// Thread-safety: safe from any thread; the step is pinned while checked.
#ifndef CKPT_DAEMON_TIER_HELD_FILES_VERIFY_H_
#define CKPT_DAEMON_TIER_HELD_FILES_VERIFY_H_

#include <cstddef>
#include <string>

#include "ckpt/v1/coordinator.pb.h"
#include "daemon/tier/memory_tier.h"

namespace ckpt::tier {

// The size of a share's fold (ShareFold.fold).
inline constexpr size_t kFoldBytes = 4096;
// A report names at most this many files and folds; past them it says so
// in its error (the coordinator fails the verify then).
inline constexpr int kMaxReportFiles = 4096;
inline constexpr int kMaxReportFolds = 64;
// Each verdict's detail is cut to this many bytes.
inline constexpr size_t kMaxVerdictDetail = 512;

// Checks the files `host` (this daemon's name) holds of the order's step.
// Test builds: the corruption points verify.flip_replica (a byte of the
// first replica file held here), verify.flip_parity (of the first parity
// file) and verify.drop_own (this host's first own data file removed)
// damage the step right before it is checked, so tests see what a host
// that lost or damaged a copy reports.
v1::HostVerifyReport VerifyHeldFiles(MemoryTier& tier, const v1::VerifyOrder& order,
                                     const std::string& host);

// Folds `length` bytes at position `position` of a share into `fold`
// (kFoldBytes long): fold[(position + i) % kFoldBytes] ^= data[i].
void FoldInto(std::string& fold, uint64_t position, const char* data, uint64_t length);

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_HELD_FILES_VERIFY_H_
