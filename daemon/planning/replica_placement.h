// Where the copies of a memory-tier save spread over hosts go (docs/design.md
// §8): each host's data files are copied whole to the R hosts after it in
// a ring of the save's hosts, as Gemini places them. The ring spreads the
// hosts' failure domains (HostIdentity.failure_domain) so that no host is
// followed by one of its own domain wherever the domains allow it (each
// next host from the domain with the most hosts left): a rack lost takes
// no copy of its hosts' parts with it when there are more racks than
// copies. Without domains the ring
// is by host name. A host that loses its memory finds every file of its own
// on its successors, and the files it kept for its predecessors on theirs.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_PLANNING_REPLICA_PLACEMENT_H_
#define CKPT_DAEMON_PLANNING_REPLICA_PLACEMENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/planning/load_spread.h"

namespace ckpt::planning {

// Pieces of a replicated file sent as one transfer each.
inline constexpr uint64_t kReplicaPieceBytes = uint64_t{16} << 20;

// One ReplicaPlan per host of `parts` (by host name). `addresses`: each
// host's peer data channel. FAILED_PRECONDITION when `replicas` copies need
// more hosts than the save has, or a host has no peer data channel.
absl::StatusOr<std::map<std::string, v1::ReplicaPlan>> PlaceReplicas(
    const std::map<std::string, std::shared_ptr<const v1::HostAssignment>>& parts,
    const std::map<std::string, std::string>& addresses, int replicas, uint64_t replica_id,
    const std::string& secret);

// The ring PlaceReplicas and PlaceErasure use, of hosts by name with
// their failure domains (empty: none): each host's replicas are the R
// hosts after it (ckptctl verify finds where copies should be with it).
std::vector<std::string> RingOfHosts(const std::map<std::string, std::string>& domain_of);

// The files of one host's part, each with the end of its last item.
v1::ReplicaPeer ReplicaFilesOf(const v1::HostAssignment& part);

// Pieces of an erasure-coded share: k + m of them are in memory at once
// on the host encoding or rebuilding a stripe.
inline constexpr uint64_t kErasurePieceBytes = uint64_t{4} << 20;

// Erasure coding instead of replicas (coordinator.proto ErasurePlan): the
// hosts in ring order (above) in groups of k+m, so a group spans k+m
// domains where there are that many; in a group, the host at position
// p cuts its files (laid end to end) into k shares of ceil(bytes / k), its
// share t going to stripe (p - t) mod (k+m), whose data shares are those of
// positions s .. s+k-1 and whose parity shares are on positions
// s+k .. s+k+m-1 (mod k+m). Every host is data in k stripes and parity in
// m. `whole` lists every stripe; `hosts` each host's (those it is in).
struct ErasurePlacement {
  v1::ErasurePlan whole;
  std::map<std::string, v1::ErasurePlan> hosts;
};
// FAILED_PRECONDITION, naming the flag, when the hosts are not a multiple
// of k+m or a host has no peer data channel.
absl::StatusOr<ErasurePlacement> PlaceErasure(
    const std::map<std::string, std::shared_ptr<const v1::HostAssignment>>& parts,
    const std::map<std::string, std::string>& addresses, int k, int m, uint64_t id,
    const std::string& secret);

// A data share a load's rebuild restores (ErasureRebuild): the host that
// lost it, the host that rebuilds it, the files its range of the lost
// host's files reaches, and its bytes.
struct LostShare {
  std::string host;
  std::string rebuilder;
  std::vector<std::string> files;
  uint64_t bytes = 0;
};
// Every lost share the rebuild names, in its order (unchecked input: the
// shares and indices it names, where they exist).
std::vector<LostShare> LostShares(const v1::ErasureRebuild& rebuild);

// A memory-tier step's lost data shares (hosts that hold none of their
// files any more, or take no part in the load), each rebuilt by one host of
// the load from k surviving shares: the lost host itself when it takes part
// (a replacement), else the host holding the fewest files. `holders` gains
// the rebuilders of the lost files. UNAVAILABLE when a stripe lost more
// than its parity can rebuild.
absl::StatusOr<v1::ErasureRebuild> PlanRebuild(const v1::ErasurePlan& stripes,
                                               const std::set<std::string>& load_hosts,
                                               FileHolders& holders);

// Parity share j of stripe s, in the step's directory.
std::string ParityFileName(uint32_t stripe, uint32_t j);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_REPLICA_PLACEMENT_H_
