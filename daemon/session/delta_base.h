// Which step a durable save stores its deltas against (docs/compression.md,
// "Step deltas"): with a full step every K, the job's latest committed step
// when it is full, or the base of the latest when that is a delta of
// ordinal below K - 1 (the manifest's delta_ordinal); never a step at or
// above the one being saved. A chunk is a delta candidate where the base holds the same chunk
// at the same place: the same tensor, dtype, shard region, shard offset and
// length at the same file and offset. A changed layout matches nothing, so
// the step is stored whole and the next one takes it as its base.
//
// Thread-safety: ChooseDeltaBase is safe from any thread; a DeltaBase is
// immutable once made.
#ifndef CKPT_DAEMON_SESSION_DELTA_BASE_H_
#define CKPT_DAEMON_SESSION_DELTA_BASE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "ckpt/v1/manifest.pb.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/exec/writer_pool.h"
#include "daemon/storage/backend.h"

namespace ckpt::session {

struct DeltaBase {
  std::shared_ptr<const exec::DeltaSource> source;  // the base step's directory
  uint32_t ordinal = 0;                             // this save is the n-th delta
  v1::CheckpointManifest manifest;                  // the base step's
  // (file, file offset) -> the base's chunk there, where the plan puts the
  // same chunk.
  std::map<std::pair<std::string, uint64_t>, const v1::StoredChunk*> chunks;
  // Held until the save ends: gc does not remove the base under it.
  std::unique_ptr<storage::FileLock> pin;

  const v1::StoredChunk* At(const std::string& file, uint64_t file_offset) const {
    auto it = chunks.find({file, file_offset});
    return it == chunks.end() ? nullptr : it->second;
  }
};

// Points `task` at its base chunk, where `delta` (null: none) has one at
// the task's offset of `file`. The task shares the base's ownership: a
// writer may use it past the save's end.
void PointAtDeltaBase(const std::shared_ptr<const DeltaBase>& delta, const std::string& file,
                      exec::WriteTask& task);

// The base for a save of `step` of `job` whose plan is `planned`, or null
// for none (delta_every <= 1, no full step to take, nothing matches, or
// the base cannot be read: deltas only ever save bytes, so a base that
// fails just makes the step whole; the reason is logged).
std::shared_ptr<const DeltaBase> ChooseDeltaBase(coordinator::Catalog& catalog,
                                                 storage::Backend& backend, const std::string& job,
                                                 int64_t step, int delta_every,
                                                 const v1::CheckpointManifest& planned);

}  // namespace ckpt::session

#endif  // CKPT_DAEMON_SESSION_DELTA_BASE_H_
