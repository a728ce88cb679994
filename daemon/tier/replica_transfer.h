// The copies of a memory-tier save spread over hosts (docs/design.md §8,
// coordinator.proto ReplicaPlan): each host sends its data files, from its
// memory tier, to its replica hosts over the peer data channel, and keeps
// the files its predecessors send it in its own memory tier beside its
// own. A save reports only once both ended, so its commit waits for every
// replica. Files go in pieces (one transfer each, into a buffer of one
// piece), so no host needs room for a whole file outside its budget.
//
// Thread-safety: functions; each call runs in its caller's thread.
#ifndef CKPT_DAEMON_TIER_REPLICA_TRANSFER_H_
#define CKPT_DAEMON_TIER_REPLICA_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/peer/peer_receiver.h"
#include "daemon/storage/backend.h"
#include "daemon/tier/memory_plan_check.h"

namespace ckpt::tier {

// Sends this host's files under `dir` (the save's partial directory in
// `backend`) to every host of plan.send_to, one after the other. Each
// piece waits for its receiver's acknowledgement. `cancelled` is asked
// between pieces and while a receiver has not yet taken one.
// *sent counts the bytes acknowledged.
absl::Status SendReplicas(storage::Backend& backend, const std::string& dir,
                          const v1::ReplicaPlan& plan, const std::function<bool()>& cancelled,
                          uint64_t* sent);

// Receives the files of every host of plan.receive_from into `dir`, each
// sender on a stream of its own (stream_tasks.h).
// Returns once every piece arrived and was written, or at the first error
// (naming the sender), or CANCELLED once `cancelled` says so, or
// DEADLINE_EXCEEDED when a piece has not arrived by `deadline`.
absl::Status ReceiveReplicas(peer::PeerReceiver& receiver, storage::Backend& backend,
                             const std::string& dir, const v1::ReplicaPlan& plan,
                             const std::function<bool()>& cancelled, absl::Time deadline);

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_REPLICA_TRANSFER_H_
