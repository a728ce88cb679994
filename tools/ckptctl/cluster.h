// ckptctl cluster: the coordinator's view of the node daemons (hosts,
// heartbeat ages, pool use and saves/loads in flight per host).
#ifndef CKPT_TOOLS_CKPTCTL_CLUSTER_H_
#define CKPT_TOOLS_CKPTCTL_CLUSTER_H_

#include "ckpt/v1/cluster.grpc.pb.h"
#include "tools/ckptctl/commands.h"

namespace ckpt::ctl {

// Exit 0 with the table (or JSON); 1 when the daemon is not a coordinator
// or refuses; 3 when unreachable.
int RunCluster(const Call& call, v1::ClusterService::StubInterface& stub, bool json);

}  // namespace ckpt::ctl

#endif  // CKPT_TOOLS_CKPTCTL_CLUSTER_H_
