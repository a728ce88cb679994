#include "daemon/coordinator/committer.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/commit.h"
#include "daemon/coordinator/partial_dir.h"
#include "daemon/coordinator/saved_manifest.h"
#include "daemon/coordinator/tier_choice.h"
#include "daemon/fault/fault_points.h"
#include "daemon/storage/layout.h"

namespace ckpt::coordinator {

Committer::Committer(storage::Backend& backend, Catalog& catalog)
    : backend_(backend), catalog_(catalog), gc_(backend, catalog) {}

void Committer::EnableRetention(planning::RetentionConfig config) {
  retention_config_ = config;
  retention_ = std::make_unique<RetentionRunner>(gc_, std::move(config));
}

absl::StatusOr<Committer::Fenced> Committer::EnterFence(const std::string& job) {
  Fenced out;
  const int64_t epoch = fencing_.epoch ? fencing_.epoch() : 0;
  // The term that enters the fence is the one that commits: a later term
  // of this same coordinator (deposed and elected again) is another.
  out.still_ours = [this, epoch]() -> absl::Status {
    if (fencing_.still_leading) {
      if (absl::Status s = fencing_.still_leading(); !s.ok()) return s;
    }
    const int64_t now = fencing_.epoch ? fencing_.epoch() : 0;
    if (now != epoch) {
      return absl::FailedPreconditionError(absl::StrCat("the term that began this commit (epoch ",
                                                        epoch, ") ended; epoch ", now, " leads"));
    }
    return absl::OkStatus();
  };
  if (epoch <= 0) return out;
  const std::string job_dir = storage::JobDir(catalog_.root(), job);
  absl::StatusOr<std::unique_ptr<EpochFence>> fence =
      EnterEpochFence(backend_, job_dir, epoch, out.still_ours);
  if (!fence.ok()) {
    if (IsFencedCommit(fence.status())) fenced_commits_.fetch_add(1, std::memory_order_relaxed);
    return fence.status();
  }
  out.fence = std::move(*fence);
  if (backend_.IsObjectStore()) {
    // An object store's fence lock is a lease, which a holder stalled past
    // it loses without knowing: EPOCH is read again just before the commit
    // object is written.
    out.still_ours = [this, job_dir, epoch, ours = out.still_ours]() -> absl::Status {
      if (absl::Status s = ours(); !s.ok()) return s;
      absl::StatusOr<int64_t> stored = ReadJobEpoch(backend_, job_dir);
      if (!stored.ok()) return stored.status();
      if (*stored > epoch) {
        return absl::FailedPreconditionError(absl::StrCat(
            "leader epoch ", *stored, " has committed to this job since epoch ", epoch, " began"));
      }
      return absl::OkStatus();
    };
  }
  return out;
}

std::function<absl::Status()> Committer::FencedCommitPoint(
    const Fenced& fenced, const std::function<absl::Status()>& point) const {
  if (!fencing_.still_leading && !fencing_.epoch) return point;
  return [this, ours = fenced.still_ours, point]() -> absl::Status {
    if (absl::Status s = ours(); !s.ok()) {
      fenced_commits_.fetch_add(1, std::memory_order_relaxed);
      return absl::FailedPreconditionError(absl::StrCat("commit fenced: ", s.message()));
    }
    return point ? point() : absl::OkStatus();
  };
}

void Committer::Retain(const std::string& job) {
  if (retention_ != nullptr) retention_->Committed(job);
}

absl::Status Committer::CommitSave(const planning::SavePlan& plan, int64_t created_unix_ms,
                                   const std::map<std::string, v1::NodePersistReport>& reports,
                                   const std::string& partial_dir, std::string* manifest_out,
                                   const std::function<absl::Status()>& commit_point) {
  absl::StatusOr<ManifestFiles> files =
      SavedManifest(plan, created_unix_ms, reports,
                    {catalog_.split_manifest_min_chunks(), catalog_.limits()}, manifest_out);
  if (!files.ok()) return files.status();
  // Fault tests hold or kill a coordinator here, its commit not yet fenced.
  FaultPoint("commit.before_fence");
  // The job's fence first (it may wait for another coordinator's commit
  // of this job), then this process's turn.
  absl::StatusOr<Fenced> fenced = EnterFence(files->job);
  if (!fenced.ok()) return fenced.status();
  absl::MutexLock lock(&mu_);
  return CommitCheckpoint(backend_, catalog_.root(), partial_dir, *files, /*make_latest=*/true,
                          FencedCommitPoint(*fenced, commit_point));
}

absl::StatusOr<std::string> Committer::CommitCopy(
    const v1::CheckpointManifest& manifest,
    const std::function<absl::Status(const std::string& partial_dir)>& copy) {
  const std::string& job = manifest.job();
  const int64_t step = manifest.step();
  const std::string& root = catalog_.root();
  // Its save time decides whether it becomes latest (tier_choice.h): one
  // from the future (a host's clock, or a forged manifest) would outrank
  // every later save.
  constexpr absl::Duration kMaxClockSkew = absl::Minutes(10);
  const absl::Time saved = absl::FromUnixMillis(manifest.created_unix_ms());
  if (saved > absl::Now() + kMaxClockSkew) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step, " of job ", job, " says it was saved at ", absl::FormatTime(saved),
        ", more than ", absl::FormatDuration(kMaxClockSkew), " from now: not committed"));
  }
  absl::StatusOr<bool> exists = catalog_.StepExists(job, step);
  if (!exists.ok()) return exists.status();
  if (*exists) {
    return absl::AlreadyExistsError(
        absl::StrCat("step ", step, " of job ", job, " is committed in ", root));
  }
  const std::string partial = storage::PartialDir(root, job, step, catalog_.NewPartialId());
  absl::Status status = CreatePartialDir(backend_, root, job, partial);
  if (status.ok()) status = copy(partial);
  if (status.ok()) {
    absl::StatusOr<Fenced> fenced = EnterFence(job);
    absl::MutexLock lock(&mu_);
    // Copied in late: a step saved after it and committed meanwhile stays
    // latest (tier_choice.h), whatever its number: a rollback stays latest.
    // Decided inside the fence: no other coordinator commits the job now.
    bool make_latest = true;
    if (absl::StatusOr<int64_t> latest = catalog_.ResolveStep(job, -1); latest.ok()) {
      absl::StatusOr<v1::CheckpointManifest> newest = catalog_.ReadManifest(job, *latest);
      make_latest = !newest.ok() || SavedAfter({step, manifest.created_unix_ms()},
                                               {*latest, newest->created_unix_ms()});
    }
    status = fenced.ok()
                 ? CommitCheckpoint(backend_, root, partial, manifest, make_latest,
                                    FencedCommitPoint(*fenced, nullptr),
                                    {catalog_.split_manifest_min_chunks(), catalog_.limits()})
                 : fenced.status();
  }
  if (!status.ok()) {
    // Best effort: restart removes the rest.
    if (!CommitOutcomeUnknown(status)) (void)backend_.RemoveAll(partial);
    return status;
  }
  Retain(job);
  return storage::StepDir(root, job, step);
}

}  // namespace ckpt::coordinator
