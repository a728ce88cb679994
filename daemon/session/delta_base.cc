#include "daemon/session/delta_base.h"

#include <cstdio>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/retention.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/step_location.h"

namespace ckpt::session {
namespace {

void Log(const std::string& job, int64_t step, const std::string& why) {
  std::fprintf(stderr, "ckptd: save job=%s step=%lld: stored whole, not as a delta: %s\n",
               job.c_str(), static_cast<long long>(step), why.c_str());
}

// What must be equal for a chunk to be a delta against the base's chunk at
// the same place: the tensor, its dtype, the shard's region (as written),
// the place within the shard and the length.
using ChunkKey = std::tuple<std::string, int, std::string, uint64_t, uint64_t>;

ChunkKey KeyOf(const v1::TensorEntry& t, const v1::StoredShard& s, const v1::StoredChunk& c) {
  return {t.fqn(), static_cast<int>(t.dtype()), s.region().SerializeAsString(), c.shard_offset(),
          c.length()};
}

}  // namespace

void PointAtDeltaBase(const std::shared_ptr<const DeltaBase>& delta, const std::string& file,
                      exec::WriteTask& task) {
  const v1::StoredChunk* base = delta == nullptr ? nullptr : delta->At(file, task.file_offset);
  if (base == nullptr) return;
  task.delta_base = std::shared_ptr<const v1::StoredChunk>(delta, base);
  task.delta_source = delta->source;
}

std::shared_ptr<const DeltaBase> ChooseDeltaBase(coordinator::Catalog& catalog,
                                                 storage::Backend& backend, const std::string& job,
                                                 int64_t step, int delta_every,
                                                 const v1::CheckpointManifest& planned) {
  if (delta_every <= 1) return nullptr;
  // The latest step (one manifest read, not the job's every step): whole,
  // it is the base; a delta, its base is while fewer than K - 1 deltas
  // follow it (its ordinal says how many, whatever gc removed).
  absl::StatusOr<v1::CheckpointManifest> latest = catalog.ReadManifest(job, -1);
  if (!latest.ok()) {
    if (!absl::IsNotFound(latest.status())) Log(job, step, std::string(latest.status().message()));
    return nullptr;
  }
  if (latest->step() >= step) return nullptr;  // nothing below to take
  const bool latest_whole = !latest->has_delta_base_step();
  const int64_t base = latest_whole ? latest->step() : latest->delta_base_step();
  const uint64_t ordinal = latest_whole ? 1 : uint64_t{latest->delta_ordinal()} + 1;
  if (ordinal >= static_cast<uint64_t>(delta_every)) return nullptr;  // whole: the next base

  auto out = std::make_shared<DeltaBase>();
  out->ordinal = static_cast<uint32_t>(ordinal);
  absl::StatusOr<std::unique_ptr<storage::FileLock>> pin =
      coordinator::PinStep(backend, catalog.root(), job, base);
  if (!pin.ok()) {
    Log(job, step, absl::StrCat("its base, step ", base, ": ", pin.status().message()));
    return nullptr;
  }
  out->pin = std::move(*pin);
  absl::StatusOr<v1::CheckpointManifest> manifest =
      latest_whole ? *std::move(latest) : catalog.ReadManifest(job, base);
  if (!manifest.ok()) {
    Log(job, step, absl::StrCat("its base, step ", base, ": ", manifest.status().message()));
    return nullptr;
  }
  if (manifest->has_delta_base_step()) return nullptr;  // bases are whole steps
  out->manifest = *std::move(manifest);
  absl::StatusOr<std::string> dir = storage::ResolveStepDir(backend, catalog.root(), job, base);
  if (!dir.ok()) {
    Log(job, step, absl::StrCat("its base, step ", base, ": ", dir.status().message()));
    return nullptr;
  }
  out->source = std::make_shared<const exec::DeltaSource>(
      exec::DeltaSource{&backend, *dir, base, out->ordinal});

  std::map<std::pair<std::string, uint64_t>, std::pair<ChunkKey, const v1::StoredChunk*>> at;
  for (const v1::TensorEntry& t : out->manifest.tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) {
        if (!c.has_delta_base()) at[{c.file(), c.file_offset()}] = {KeyOf(t, s, c), &c};
      }
    }
  }
  for (const v1::TensorEntry& t : planned.tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) {
        auto it = at.find({c.file(), c.file_offset()});
        if (it != at.end() && it->second.first == KeyOf(t, s, c)) {
          out->chunks[{c.file(), c.file_offset()}] = it->second.second;
        }
      }
    }
  }
  if (out->chunks.empty()) return nullptr;  // another layout: this step is the next base
  return out;
}

}  // namespace ckpt::session
