// A load spread over hosts, read once (docs/design.md §5): the global load plan
// (every rank of every host) is cut into each host's part. Every stored
// chunk the job needs is read from storage by exactly one host, among those
// that need it, the one with the fewest bytes to read so far (largest chunks
// first); it forwards the chunk over the peer data channel to the other
// hosts that need it. Chunks come in global groups, in one order on every
// host, each at most group_bytes on any one host: hosts that fill their
// pool rooms in that order cannot wait on each other in a cycle.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_PLANNING_LOAD_SPREAD_H_
#define CKPT_DAEMON_PLANNING_LOAD_SPREAD_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "ckpt/v1/coordinator.pb.h"

namespace ckpt::planning {

struct LoadSpread {
  std::map<std::string, v1::LoadAssignment> parts;  // by host
  uint64_t unique_bytes = 0;                        // of the chunks read, each once
};

// By data file, the hosts that hold it (a memory-tier step: the host that
// wrote it and its replicas).
using FileHolders = std::map<std::string, std::set<std::string>>;

// `rank_hosts`: the host of every rank in `global`. `addresses`: each
// host's peer data channel; `secret` is LoadPeers.secret. With `holders`,
// each chunk is read by a host holding its file (every file must have a
// holder among the hosts): one that needs it if any, else a holder that
// reads it only to forward it (its part lists it with no runs, or as an
// object read of rank -1).
LoadSpread SpreadLoad(const v1::LoadAssignment& global,
                      const std::map<int, std::string>& rank_hosts,
                      const std::map<std::string, std::string>& addresses, uint64_t group_bytes,
                      uint64_t load_id, const std::string& secret,
                      const FileHolders* holders = nullptr);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_LOAD_SPREAD_H_
