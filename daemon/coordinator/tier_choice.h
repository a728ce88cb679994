// Which of a daemon's two stores -- storage (durable) and the memory tier --
// a load of (job, step or latest) takes, written once for the node daemon's
// loads (tier/stores.h) and the cluster coordinator's (spanning_load.cc),
// and the one rule for "latest" that list, load, inspect, verify and the
// memory tier's persistence share:
//  - latest is the step committed last, a rollback (a lower step saved
//    after higher ones) included. Within one store its LATEST names it
//    (commit.h); across the two stores, and for a step copied late into
//    storage, the step whose save was planned last (its manifest's
//    created_unix_ms) is the newer, the higher step on a tie;
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

// A step's place in the order of commits, as its manifest records it.
struct SavedAt {
  int64_t step = 0;
  int64_t created_unix_ms = 0;
};
// Whether `a` was saved after `b` (the rule above).
bool SavedAfter(const SavedAt& a, const SavedAt& b);

// The latest step of `job` over both stores (`memory` may be null):
// storage's error when neither holds one. A store's latest whose manifest
// cannot be read loses to the other's.
absl::StatusOr<int64_t> LatestOfTiers(Catalog& durable, Catalog* memory, const std::string& job);

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
