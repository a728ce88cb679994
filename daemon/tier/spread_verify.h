// The coordinator's part of `ckptctl verify` of a memory-tier step spread
// over hosts (docs/design.md §8): what to ask each host (VerifyOrders),
// and the verdict on their answers (JudgeSpreadVerify), which names every
// problem by host and file:
//  - a file a host holds that fails (held_files_verify.h): corrupt, with
//    the chunk;
//  - a file a host should hold and does not: "missing from host H". Where
//    copies should be is the save's placement, found again: each data
//    file on its writer's host (data/<host>-<writer>.bin), its replicas on
//    the R hosts after it in the ring of the step's hosts
//    (replica_placement.h RingOfHosts, by the domains the registry knows),
//    and each erasure stripe's parity where its stripes say (the ERASURE
//    file beside the MANIFEST);
//  - a parity share whose fold is not the code of its data shares' folds;
//  - a host that should hold copies and did not answer: unreachable.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_TIER_SPREAD_VERIFY_H_
#define CKPT_DAEMON_TIER_SPREAD_VERIFY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/manifest.pb.h"
#include "ckpt/v1/node.pb.h"

namespace ckpt::tier {

// What one host answered: its report, or why it could not be reached.
struct HostAnswer {
  bool reached = false;
  std::string why;  // when not reached
  v1::HostVerifyReport report;
};

struct SpreadVerdict {
  std::vector<std::string> problems;  // one line each, naming host and file
  std::vector<v1::VerifyCheckpointResponse::HostCopies> hosts;  // those that hold any
  uint64_t chunks = 0;
  uint64_t bytes = 0;
};

// The order for each of `hosts`: the step, and the stripes (of `stripes`,
// null without erasure coding) the host holds a share of, without
// addresses or secrets.
std::map<std::string, v1::VerifyOrder> VerifyOrders(uint64_t round, const std::string& job,
                                                    int64_t step,
                                                    const std::vector<std::string>& hosts,
                                                    const v1::ErasurePlan* stripes);

// `replicas`: the copies of each host's files on others (the coordinator's
// --memory_tier_replicas; unused with `stripes`). `domains`: each host the
// registry knows, with its failure domain.
SpreadVerdict JudgeSpreadVerify(const v1::CheckpointManifest& manifest,
                                const v1::ErasurePlan* stripes, int replicas,
                                const std::map<std::string, std::string>& domains,
                                const std::map<std::string, HostAnswer>& answers);

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_SPREAD_VERIFY_H_
