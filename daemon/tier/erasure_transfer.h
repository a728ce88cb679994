// Erasure coding of memory-tier saves spread over hosts (coordinator.proto
// ErasurePlan, ErasureRebuild), on one host:
//
//  - at save, each data share this host holds (a range of its own files)
//    goes to its stripe's parity hosts, and each parity share it holds is
//    encoded here (tier/erasure_code.h) from the k data shares sent to it;
//  - at load, a host whose shares were lost gets them rebuilt: the
//    stripe's surviving hosts send k shares to the rebuilder, which
//    reconstructs the lost data shares into their host's files.
//
// Shares travel in pieces over the peer data channel, one transfer each.
// Every stream (one share to one host) runs on a thread of its own, and
// every stripe encoded or rebuilt here too, so no stream ever waits on a
// stream of another stripe: hosts that are each other's senders and
// receivers cannot wait on each other in a cycle. A stripe holds k + m
// pieces in memory at a time.
//
// Thread-safety: functions; each call joins the threads it starts.
#ifndef CKPT_DAEMON_TIER_ERASURE_TRANSFER_H_
#define CKPT_DAEMON_TIER_ERASURE_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/peer/peer_receiver.h"
#include "daemon/planning/replica_placement.h"
#include "daemon/storage/backend.h"
#include "daemon/tier/memory_plan_check.h"

namespace ckpt::tier {

// Save: sends the data shares `host` holds (its files under `dir`) to their
// parity hosts, and encodes the parity shares it holds into their files
// under `dir`, from the data shares the others send. Returns once both
// ended. *sent counts the bytes acknowledged.
absl::Status ExchangeStripes(peer::PeerReceiver* receiver, storage::Backend& backend,
                             const std::string& dir, const v1::ErasurePlan& plan,
                             const std::string& host, const std::function<bool()>& cancelled,
                             absl::Time deadline, uint64_t* sent);

// Load: sends the shares `host` holds (under `dir`) that a rebuild needs,
// and rebuilds the lost shares the plan gives this host into their files
// under `rebuilt_dir` (created). *sent counts the bytes acknowledged.
absl::Status RunRebuild(peer::PeerReceiver* receiver, storage::Backend& backend,
                        const std::string& dir, const std::string& rebuilt_dir,
                        const v1::ErasureRebuild& rebuild, const std::string& host,
                        const std::function<bool()>& cancelled, absl::Time deadline,
                        uint64_t* sent);

// The shares a load's rebuild restores (planning/replica_placement.h: the
// coordinator names the rebuilt files to every host of the load with them).
using planning::LostShare;
using planning::LostShares;

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_ERASURE_TRANSFER_H_
