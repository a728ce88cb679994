// `ckptctl verify` of a memory-tier step at the cluster's coordinator: the
// coordinator holds only the step's MANIFEST (and ERASURE); its hosts hold
// the data, replicas and parity. Every live registered host is asked, in
// its next heartbeat's answer, to check what it holds (held_files_verify.h),
// and this daemon checks what it holds itself; the answers are judged
// together (spread_verify.h). OK fills `response` per host; otherwise
// DATA_LOSS (FAILED_PRECONDITION when hosts could only not be reached) names
// every problem by host and file, one a line (the first kMaxProblemLines).
//
// Thread-safety: safe from any thread (the rounds are).
#ifndef CKPT_DAEMON_SERVICE_CLUSTER_VERIFY_H_
#define CKPT_DAEMON_SERVICE_CLUSTER_VERIFY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/session/node_context.h"

namespace ckpt::service {

inline constexpr int kMaxProblemLines = 64;

// `caller` (its principal, described) runs at most
// VerifyRounds::kMaxRoundsPerCaller of these at once; `gone`: the caller
// cancelled or its deadline passed.
absl::Status VerifySpreadMemoryStep(session::NodeContext& context, const std::string& job,
                                    int64_t step, const std::string& caller,
                                    const std::function<bool()>& gone,
                                    v1::VerifyCheckpointResponse* response);

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_CLUSTER_VERIFY_H_
