// Where the copies of a memory-tier save spread over hosts go (DESIGN.md
// §8): each host's data files are copied whole to the R hosts after it in
// a ring of the save's hosts sorted by name, as Gemini places them. A host
// that loses its memory finds every file of its own on its successors, and
// the files it kept for its predecessors on theirs.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_COORDINATOR_REPLICA_PLACEMENT_H_
#define CKPT_DAEMON_COORDINATOR_REPLICA_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ckpt/v1/coordinator.pb.h"

namespace ckpt::coordinator {

// Pieces of a replicated file sent as one transfer each.
inline constexpr uint64_t kReplicaPieceBytes = uint64_t{16} << 20;

// One ReplicaPlan per host of `parts` (by host name). `addresses`: each
// host's peer data channel. FAILED_PRECONDITION when `replicas` copies need
// more hosts than the save has, or a host has no peer data channel.
absl::StatusOr<std::map<std::string, v1::ReplicaPlan>> PlaceReplicas(
    const std::map<std::string, std::shared_ptr<const v1::HostAssignment>>& parts,
    const std::map<std::string, std::string>& addresses, int replicas, uint64_t replica_id,
    const std::string& secret);

// The files of one host's part, each with the end of its last item.
v1::ReplicaPeer ReplicaFilesOf(const v1::HostAssignment& part);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_REPLICA_PLACEMENT_H_
