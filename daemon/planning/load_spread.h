// A load spread over hosts, read once (docs/design.md §5): the global load plan
// (every rank of every host) is cut into each host's part. Every stored
// chunk the job needs is read from storage by exactly one host, among those
// that need it, the one with the fewest bytes to read so far (largest chunks
// first); it forwards the chunk over the peer data channel to the other
// hosts that need it. Chunks come in global groups, in one order on every
// host, each at most group_bytes on any one host: hosts that fill their
// pool rooms in that order cannot wait on each other in a cycle.
#ifndef CKPT_DAEMON_PLANNING_LOAD_SPREAD_H_
#define CKPT_DAEMON_PLANNING_LOAD_SPREAD_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ckpt/v1/coordinator.pb.h"
#include "daemon/planning/global_load.h"

namespace ckpt::planning {

// By data file, the hosts that hold it (a memory-tier step: the host that
// wrote it and its replicas).
using FileHolders = std::map<std::string, std::set<std::string>>;

// Who reads each chunk and in which group, decided once for the whole
// load; each host's part is made from that when the host asks for it. A
// chunk that n hosts need is in n parts (the reader's, and each receiver's),
// so the parts of a cluster's load are many times the global plan: made
// one at a time, as each host asks, and dropped once sent, they never all
// lie in the coordinator's memory.
//
// Thread-safety: Part may be called from several threads at once.
class LoadSpread {
 public:
  // `rank_hosts`: the host of every rank in `global`. `addresses`: each
  // host's peer data channel; `secret` is LoadPeers.secret. With `holders`,
  // each chunk is read by a host holding its file (every file must have a
  // holder among the hosts): one that needs it if any, else a holder that
  // reads it only to forward it (its part lists it with no runs, or as an
  // object read of rank -1). Decided on up to `threads` threads
  // (parallel_for.h; 0: the cores it may run on, at most 8), the same on
  // any number.
  LoadSpread(std::shared_ptr<const GlobalLoad> global, const std::map<int, std::string>& rank_hosts,
             const std::map<std::string, std::string>& addresses, uint64_t group_bytes,
             uint64_t load_id, const std::string& secret, const FileHolders* holders = nullptr,
             int threads = 0);
  ~LoadSpread();
  LoadSpread(LoadSpread&&) noexcept;
  LoadSpread& operator=(LoadSpread&&) noexcept;

  // The hosts with a part, in name order: every host of a rank, and a
  // holder that only reads and forwards.
  const std::vector<std::string>& hosts() const;
  // Of the chunks read, each once.
  uint64_t unique_bytes() const;
  const GlobalLoad& global() const;
  // The host's part, made now; nullopt for a host without one.
  std::optional<v1::LoadAssignment> Part(const std::string& host) const;

 private:
  struct Decisions;
  std::unique_ptr<const Decisions> decisions_;
};

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_LOAD_SPREAD_H_
