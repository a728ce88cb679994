// The version of the protocol between node daemons and coordinators
// (cluster.proto, coordinator.proto), exchanged at registration so that a
// rolling restart of a cluster (coordinators one by one, then nodes) never
// pairs a node with a coordinator that would misread it: each side refuses
// a version outside the range it serves, naming both.
//
//   1  compact plans (coordinator.proto), no epochs. Sent as 0: the field
//      did not exist yet.
//   2  the leader's epoch on registrations, heartbeats and plans
//      (docs/failover.md).
#ifndef CKPT_PROTO_LIB_CLUSTER_PROTOCOL_H_
#define CKPT_PROTO_LIB_CLUSTER_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ckpt {

inline constexpr uint32_t kClusterProtocolVersion = 2;
inline constexpr uint32_t kOldestClusterProtocolVersion = 1;

// A version as sent: 0 is the release before versions were sent.
inline uint32_t ClusterProtocolOf(uint32_t sent) { return sent == 0 ? 1 : sent; }

// OK when this side serves `sent` (the other side's); `who` names it.
inline absl::Status CheckClusterProtocol(uint32_t sent, const std::string& who,
                                         const std::string& self) {
  const uint32_t version = ClusterProtocolOf(sent);
  if (version >= kOldestClusterProtocolVersion && version <= kClusterProtocolVersion) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat(who, " speaks cluster protocol ", version, "; ", self, " serves versions ",
                   kOldestClusterProtocolVersion, " to ", kClusterProtocolVersion,
                   ": upgrade coordinators first, then nodes"));
}

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_CLUSTER_PROTOCOL_H_
