#include "daemon/coordinator/saved_manifest.h"

#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/save_planner.h"

namespace ckpt::coordinator {
namespace {

// The hosts' checksums, put into the chunks they are of.
class ReportedChecksums {
 public:
  explicit ReportedChecksums(const std::map<std::string, v1::NodePersistReport>& reports) {
    size_t count = 0;
    for (const auto& [host, report] : reports) count += report.checksums_size();
    by_place_.reserve(count);
    for (const auto& [host, report] : reports) {
      for (const v1::ChunkChecksum& c : report.checksums()) {
        by_place_[{c.file(), c.file_offset()}] = &c;
      }
    }
  }

  absl::Status Fill(v1::StoredChunk& chunk, const std::string& owner) {
    // 0-byte items are complete in the plan: nothing written, no report.
    if (!planning::SaveChunkNeedsChecksum(chunk)) return absl::OkStatus();
    auto it = by_place_.find({chunk.file(), chunk.file_offset()});
    if (it == by_place_.end()) {
      return absl::InternalError(absl::StrCat("no checksum reported for ", chunk.file(),
                                              " at offset ", chunk.file_offset(), " (", owner,
                                              ")"));
    }
    const v1::ChunkChecksum& sum = *it->second;
    chunk.set_crc32c(sum.crc32c());
    if (sum.codec() == v1::CHUNK_CODEC_NONE) return absl::OkStatus();
    encoded_ = true;
    chunk.set_codec(sum.codec());
    chunk.set_stored_length(sum.stored_length());
    chunk.set_stored_crc32c(sum.stored_crc32c());
    chunk.set_element_bytes(sum.element_bytes());
    if (sum.has_delta_base()) {
      // One base per step: gc keeps the step the manifest names.
      if (delta_base_step_.has_value() && *delta_base_step_ != sum.delta_base_step()) {
        return absl::InvalidArgumentError(
            absl::StrCat(owner, ": a delta against step ", sum.delta_base_step(),
                         " where others are against ", *delta_base_step_));
      }
      delta_base_step_ = sum.delta_base_step();
      delta_ordinal_ = sum.delta_ordinal();
      chunk.set_delta_base_step(sum.delta_base_step());
      *chunk.mutable_delta_base() = sum.delta_base();
    }
    // A host's report is checked as a manifest read back would be.
    return planning::CheckChunkEncoding(chunk, owner);
  }

  // Some chunk was reported encoded.
  bool encoded() const { return encoded_; }

  // The manifest's delta base, when its chunks are deltas.
  absl::Status SetDeltaBase(v1::CheckpointManifest& manifest) const {
    if (!delta_base_step_.has_value()) return absl::OkStatus();
    // Only a save on one host makes deltas (delta_base.h).
    if (*delta_base_step_ < 0 || *delta_base_step_ >= manifest.step() ||
        manifest.topology().hosts_size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat("deltas against step ", *delta_base_step_,
                                                     " in step ", manifest.step(), " of ",
                                                     manifest.topology().hosts_size(), " hosts"));
    }
    manifest.set_delta_base_step(*delta_base_step_);
    manifest.set_delta_ordinal(delta_ordinal_);
    return absl::OkStatus();
  }

  // As new, the reports indexed still.
  void Restart() {
    delta_base_step_.reset();
    delta_ordinal_ = 0;
    encoded_ = false;
  }

 private:
  absl::flat_hash_map<std::pair<absl::string_view, uint64_t>, const v1::ChunkChecksum*> by_place_;
  std::optional<int64_t> delta_base_step_;
  uint32_t delta_ordinal_ = 0;
  bool encoded_ = false;
};

// The tensor chunks the plan's manifest lists.
uint64_t PlannedTensorChunks(const v1::SaveAssignment& plan) {
  const uint64_t chunk_bytes = std::max<uint64_t>(plan.chunk_bytes(), 1);
  uint64_t chunks = 0;
  for (const v1::HostAssignment& host : plan.hosts()) {
    for (const v1::WriteItem& item : host.items()) {
      if (!item.is_object()) chunks += (item.bytes() + chunk_bytes - 1) / chunk_bytes;
    }
  }
  return chunks;
}

// The split files, each tensor split as it is made; nullopt where the
// whole manifest must be made (a chunk encoded, or no split).
absl::StatusOr<std::optional<ManifestFiles>> SplitAsMade(const planning::SavePlan& plan,
                                                         int64_t created_unix_ms,
                                                         const ManifestWriting& writing,
                                                         ReportedChecksums& sums) {
  planning::ManifestSplitter splitter;
  bool whole_needed = false;
  absl::Status status = planning::ForEachPlannedTensor(
      *plan.assignment, [&](v1::TensorEntry& tensor) -> absl::Status {
        const std::string owner = absl::StrCat("tensor ", tensor.fqn());
        for (v1::StoredShard& shard : *tensor.mutable_shards()) {
          for (v1::StoredChunk& chunk : *shard.mutable_chunks()) {
            if (absl::Status s = sums.Fill(chunk, owner); !s.ok()) return s;
          }
        }
        if (sums.encoded() || !splitter.Add(tensor)) {
          whole_needed = true;
          return absl::CancelledError();  // stops the walk
        }
        return absl::OkStatus();
      });
  if (whole_needed) return std::nullopt;
  if (!status.ok()) return status;
  v1::CheckpointManifest header = plan.Header();
  header.set_created_unix_ms(created_unix_ms);
  // The objects' chunks (the header lists no tensor).
  status = planning::ForEachMutableChunk(
      header,
      [&](v1::StoredChunk& chunk, const std::string& owner) { return sums.Fill(chunk, owner); });
  if (!status.ok()) return status;
  if (sums.encoded()) return std::nullopt;
  std::optional<planning::SplitManifestFiles> split = splitter.Finish(header, writing.limits);
  if (!split.has_value()) return std::nullopt;
  return FilesOfSplit(header.job(), header.step(), *std::move(split));
}

}  // namespace

absl::StatusOr<ManifestFiles> SavedManifest(
    const planning::SavePlan& plan, int64_t created_unix_ms,
    const std::map<std::string, v1::NodePersistReport>& reports, const ManifestWriting& writing,
    std::string* joined_out) {
  ReportedChecksums sums(reports);
  if (joined_out == nullptr && writing.split_min_chunks > 0 &&
      PlannedTensorChunks(*plan.assignment) >= writing.split_min_chunks) {
    absl::StatusOr<std::optional<ManifestFiles>> split =
        SplitAsMade(plan, created_unix_ms, writing, sums);
    if (!split.ok()) return split.status();
    if (split->has_value()) return **std::move(split);
    sums.Restart();
  }
  v1::CheckpointManifest manifest = plan.Manifest();
  manifest.set_created_unix_ms(created_unix_ms);
  if (absl::Status s = planning::ForEachMutableChunk(
          manifest, [&](v1::StoredChunk& chunk,
                        const std::string& owner) { return sums.Fill(chunk, owner); });
      !s.ok()) {
    return s;
  }
  if (absl::Status s = sums.SetDeltaBase(manifest); !s.ok()) return s;
  // Encodings make the manifest larger than planned: still loadable?
  if (sums.encoded()) {
    if (absl::Status s = planning::CheckManifestSize(manifest, 0, writing.limits); !s.ok()) {
      return s;
    }
  }
  if (joined_out != nullptr) *joined_out = manifest.SerializeAsString();
  return EncodeForCommit(manifest, writing);
}

}  // namespace ckpt::coordinator
