// Which of a daemon's two stores -- storage (durable) and the memory tier --
// a load of (job, step or latest) takes, written once for the node daemon's
// loads (tier/stores.h) and the cluster coordinator's (spanning_load.cc):
//  - latest is the newest step committed in either store;
//  - a load of ANY takes memory when memory holds the step it resolves to;
//  - a load of MEMORY fails when memory lacks it; DURABLE never looks there.
//
// Thread-safety: as the catalogs'.
#ifndef CKPT_DAEMON_COORDINATOR_TIER_CHOICE_H_
#define CKPT_DAEMON_COORDINATOR_TIER_CHOICE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/coordinator/catalog.h"

namespace ckpt::coordinator {

// The newest of two stores' resolutions of one step (either may have
// failed): the one that exists, the larger of both, or `durable`'s error.
absl::StatusOr<int64_t> NewestOfTiers(const absl::StatusOr<int64_t>& durable,
                                      const absl::StatusOr<int64_t>& memory);

// The memory tier's step a load asking `from` should take, or nullopt for
// storage. `memory` is null without a memory tier; `holder` names whose it
// is in errors ("this ckptd", "the coordinator"). Errors only when the load
// asked for the memory tier alone.
absl::StatusOr<std::optional<int64_t>> MemoryStepToLoad(Catalog& durable, Catalog* memory,
                                                        const std::string& job, int64_t step,
                                                        v1::LoadTier from,
                                                        absl::string_view holder);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_TIER_CHOICE_H_
