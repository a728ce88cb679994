// NodeService.CollectGarbage (ckptctl gc): checks the request, runs the
// coordinator's garbage collector and renders its result.
#ifndef CKPT_DAEMON_SERVICE_COLLECT_GARBAGE_H_
#define CKPT_DAEMON_SERVICE_COLLECT_GARBAGE_H_

#include "absl/status/statusor.h"
#include "ckpt/v1/gc.pb.h"
#include "daemon/coordinator/coordinator.h"

namespace ckpt::service {

// INVALID_ARGUMENT for keep_last < 1, keep_every < 0, a negative grace or a
// bad job name; NOT_FOUND for a job with no checkpoints.
absl::StatusOr<v1::CollectGarbageResponse> CollectGarbage(coordinator::Coordinator& coordinator,
                                                          const v1::CollectGarbageRequest& request);

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_COLLECT_GARBAGE_H_
