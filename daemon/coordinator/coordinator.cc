#include "daemon/coordinator/coordinator.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/commit.h"
#include "daemon/coordinator/layout.h"
#include "daemon/coordinator/load_planner.h"
#include "daemon/coordinator/manifest_io.h"

namespace ckpt::coordinator {
Coordinator::Coordinator(storage::Backend& backend, std::string root, SavePlannerOptions options,
                         CatalogOptions catalog)
    : backend_(backend), catalog_(backend, std::move(root), std::move(catalog)), options_(options) {}

absl::StatusOr<v1::SaveAssignment> Coordinator::PlanSave(const v1::NodeSavePlan& node) {
  absl::StatusOr<v1::SaveAssignment> assignment = coordinator::PlanSave({node}, options_);
  if (!assignment.ok()) return assignment.status();
  absl::StatusOr<bool> exists = catalog_.StepExists(node.job(), node.step());
  if (!exists.ok()) return exists.status();
  if (*exists) {
    return absl::AlreadyExistsError("this step is already committed");
  }
  const std::string id = catalog_.NewPartialId();
  const std::string save_id = absl::StrCat(node.job(), "/", node.step(), "/", id);
  const std::string partial = PartialDir(root(), node.job(), node.step(), id);
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [other_id, save] : saves_) {
      if (save.assignment.manifest_template().job() == node.job() &&
          save.assignment.manifest_template().step() == node.step()) {
        return absl::FailedPreconditionError("this step is already being saved");
      }
    }
    assignment->set_save_id(save_id);
    assignment->set_partial_dir(partial.substr(root().size() + 1));
    assignment->mutable_manifest_template()->set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
    saves_[save_id] = ActiveSave{*assignment, partial};
  }
  // A new job directory must survive a crash with the steps committed in
  // it: its entry in the root is made durable before anything is renamed
  // into it.
  absl::StatusOr<bool> job_exists = backend_.Exists(JobDir(root(), node.job()));
  absl::Status s = job_exists.status();
  if (s.ok()) s = backend_.CreateDirs(absl::StrCat(partial, "/data"));
  if (s.ok() && !*job_exists) s = backend_.SyncDir(root());
  if (!s.ok()) {
    AbortSave(save_id, "cannot create its directory");
    return s;  // names the directory
  }
  return assignment;
}

absl::StatusOr<v1::CommitResult> Coordinator::ReportPersisted(
    const v1::NodePersistReport& report) {
  ActiveSave save;
  {
    absl::MutexLock lock(&mu_);
    auto it = saves_.find(report.save_id());
    if (it == saves_.end()) {
      return absl::NotFoundError(absl::StrCat("save ", report.save_id(), " is not active"));
    }
    save = it->second;
  }
  std::map<std::pair<std::string, uint64_t>, uint32_t> crcs;
  for (const v1::ChunkChecksum& c : report.checksums()) crcs[{c.file(), c.file_offset()}] = c.crc32c();
  v1::CheckpointManifest manifest = save.assignment.manifest_template();
  absl::Status status = ForEachMutableChunk(
      manifest, [&](v1::StoredChunk& chunk, const std::string& owner) -> absl::Status {
        // 0-byte items are complete in the plan: nothing written, no report.
        if (!SaveChunkNeedsChecksum(chunk)) return absl::OkStatus();
        auto it = crcs.find({chunk.file(), chunk.file_offset()});
        if (it == crcs.end()) {
          return absl::InternalError(absl::StrCat("no checksum reported for ", chunk.file(),
                                                  " at offset ", chunk.file_offset(), " (", owner,
                                                  ")"));
        }
        chunk.set_crc32c(it->second);
        return absl::OkStatus();
      });
  if (status.ok()) {
    absl::MutexLock lock(&commit_mu_);
    status = CommitCheckpoint(backend_, root(), save.partial_dir, manifest);
  }
  if (!status.ok()) {
    AbortSave(report.save_id(), std::string(status.message()));
    return status;
  }
  {
    absl::MutexLock lock(&mu_);
    saves_.erase(report.save_id());
  }
  v1::CommitResult result;
  result.set_step(manifest.step());
  result.set_path(StepDir(root(), manifest.job(), manifest.step()));
  return result;
}

void Coordinator::AbortSave(const std::string& save_id, const std::string& reason) {
  std::string partial;
  {
    absl::MutexLock lock(&mu_);
    auto it = saves_.find(save_id);
    if (it == saves_.end()) return;
    partial = it->second.partial_dir;
    saves_.erase(it);
  }
  // Best effort: restart removes whatever is left.
  (void)backend_.RemoveAll(partial);
}

absl::StatusOr<v1::LoadAssignment> Coordinator::PlanLoad(const v1::NodeLoadPlan& node) {
  absl::StatusOr<v1::CheckpointManifest> manifest = catalog_.ReadManifest(node.job(), node.step());
  if (!manifest.ok()) return manifest.status();
  absl::StatusOr<v1::LoadAssignment> assignment = coordinator::PlanLoad(*manifest, {node}, options_.limits);
  if (!assignment.ok()) return assignment.status();
  assignment->set_checkpoint_path(StepDir(root(), node.job(), manifest->step()));
  return assignment;
}

}  // namespace ckpt::coordinator
