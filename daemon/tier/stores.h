// The one object that decides which of a node daemon's stores holds a step:
// storage (the durable catalog) and, when the daemon has one, the memory
// tier. Every question of the kind -- which step a load takes, which copies
// an inspect or verify reads, what a job lists, whether a save may use a
// step number -- is asked here, so the rules are written once (their pure
// part in coordinator/tier_choice.h, shared with the cluster coordinator),
// and a new store is one more member, not four more edits:
//  - latest is the newest step committed in either store;
//  - a load of ANY takes memory when memory holds the step it resolves to;
//  - one step number, one checkpoint: a save is refused when the store it
//    does not write holds the step already.
//
// A value over references the daemon owns; cheap to make where needed.
// Thread-safety: as the catalogs' (safe from any thread).
#ifndef CKPT_DAEMON_TIER_STORES_H_
#define CKPT_DAEMON_TIER_STORES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/storage/backend.h"
#include "daemon/tier/memory_tier.h"

namespace ckpt::tier {

class Stores {
 public:
  // One store's copy of a step.
  struct Copy {
    const char* tier;  // "memory" or "durable"
    storage::Backend* backend;
    coordinator::Catalog* catalog;
    int64_t step;
  };

  // `memory` is null without a memory tier.
  Stores(storage::Backend& durable_backend, coordinator::Catalog& durable, MemoryTier* memory)
      : durable_backend_(durable_backend), durable_(durable), memory_(memory) {}

  // The memory tier's step a load asking `from` takes, or nullopt for
  // storage. Errors only for a load of the memory tier alone.
  absl::StatusOr<std::optional<int64_t>> MemoryStepToLoad(const std::string& job, int64_t step,
                                                          v1::LoadTier from) const;
  // Every store's copy of (job, step or latest: the newest of either),
  // memory's first. NOT_FOUND (storage's error) when neither holds it.
  absl::StatusOr<std::vector<Copy>> CopiesOf(const std::string& job, int64_t step) const;
  // The job's steps over both stores, one summary per step naming the
  // tiers that hold it, oldest first; `latest` marks the step a load of
  // latest takes. NOT_FOUND when neither store knows the job.
  absl::StatusOr<std::vector<v1::CheckpointSummary>> List(const std::string& job) const;
  // OK unless the store a save to `tier` does not write holds the step
  // (ALREADY_EXISTS, naming it).
  absl::Status AdmitSave(const std::string& job, int64_t step, v1::SaveTier tier) const;

 private:
  coordinator::Catalog* memory_catalog() const {
    return memory_ == nullptr ? nullptr : &memory_->coordinator().catalog();
  }

  storage::Backend& durable_backend_;
  coordinator::Catalog& durable_;
  MemoryTier* const memory_;
};

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_STORES_H_
