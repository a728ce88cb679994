#include "daemon/coordinator/coordinator.h"

#include <chrono>
#include <cstdio>
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
    : backend_(backend),
      catalog_(backend, std::move(root), std::move(catalog)),
      options_(options),
      gc_(backend, catalog_) {}

void Coordinator::EnableRetention(RetentionConfig config) {
  retention_config_ = config;
  retention_ = std::make_unique<RetentionRunner>(gc_, std::move(config));
}

absl::StatusOr<v1::SaveAssignment> Coordinator::PlanSave(const v1::NodeSavePlan& node) {
  // The same shards on the same host as the job's last save: no planning.
  absl::StatusOr<v1::SaveAssignment> assignment = plan_cache_.Plan({node}, options_);
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

absl::StatusOr<v1::CommitResult> Coordinator::ReportPersisted(const v1::NodePersistReport& report) {
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
  for (const v1::ChunkChecksum& c : report.checksums())
    crcs[{c.file(), c.file_offset()}] = c.crc32c();
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
  if (retention_ != nullptr) retention_->Committed(manifest.job());
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

absl::StatusOr<v1::LoadAssignment> Coordinator::PlanLoad(const v1::NodeLoadPlan& node,
                                                         std::unique_ptr<storage::FileLock>* pin) {
  // Pinned before the manifest is read. "latest" may move on between the
  // pin and the read (a commit): then the pin is taken again.
  constexpr int kPinAttempts = 3;
  absl::StatusOr<v1::CheckpointManifest> manifest;
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<storage::FileLock> held;
    int64_t pinned_step = -1;
    bool unpinnable = false;
    if (pin != nullptr) {
      absl::StatusOr<int64_t> step = catalog_.ResolveStep(node.job(), node.step());
      if (!step.ok()) return step.status();
      absl::StatusOr<std::unique_ptr<storage::FileLock>> pinned =
          PinStep(backend_, root(), node.job(), *step);
      if (pinned.ok()) {
        held = std::move(*pinned);
        pinned_step = *step;
      } else if (!absl::IsNotFound(pinned.status())) {
        // Locks do not work here (a filesystem without flock): gc cannot
        // lock the step either, so it keeps it; load unpinned.
        unpinnable = true;
        std::fprintf(stderr, "ckptd: load of job %s step %lld goes on unpinned: %s\n",
                     node.job().c_str(), static_cast<long long>(*step),
                     std::string(pinned.status().message()).c_str());
      }
      // NOT_FOUND: deleted meanwhile, or no MANIFEST; the read says which.
    }
    manifest = catalog_.ReadManifest(node.job(), node.step());
    if (!manifest.ok()) return manifest.status();
    if (pin == nullptr || unpinnable) break;
    if (held != nullptr && manifest->step() == pinned_step) {
      *pin = std::move(held);
      break;
    }
    if (attempt >= kPinAttempts) {
      return absl::AbortedError(absl::StrCat("the latest step of job ", node.job(), " changed ",
                                             kPinAttempts,
                                             " times while the load pinned it; try again"));
    }
  }
  absl::StatusOr<v1::LoadAssignment> assignment =
      coordinator::PlanLoad(*manifest, {node}, options_.limits);
  if (!assignment.ok()) return assignment.status();
  assignment->set_checkpoint_path(StepDir(root(), node.job(), manifest->step()));
  return assignment;
}

}  // namespace ckpt::coordinator
