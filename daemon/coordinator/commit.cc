#include "daemon/coordinator/commit.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/fault/fault_points.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/step_location.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/status_context.h"

namespace ckpt::coordinator {
namespace {

// Marks a status as CommitOutcomeUnknown.
constexpr char kCommitOutcomeUnknown[] = "ckpt.dev/commit-outcome-unknown";

// How often LATEST is written before the commit gives up on it for now.
constexpr int kLatestAttempts = 3;

// Creates (or truncates) path with contents and fsyncs it.
absl::Status WriteSynced(storage::Backend& backend, const std::string& path,
                         const std::string& contents) {
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> file = backend.NewWritableFile(path);
  if (!file.ok()) return file.status();
  absl::Status s = (*file)->WriteAt(0, contents.data(), contents.size());
  if (s.ok()) s = (*file)->Sync();
  absl::Status close = (*file)->Close();
  return s.ok() ? close : s;
}

absl::Status WriteLatest(storage::Backend& backend, const std::string& job_dir, int64_t step) {
  absl::Status s;
  for (int attempt = 0; attempt < kLatestAttempts; ++attempt) {
    s = storage::WriteFileAtomically(backend, absl::StrCat(job_dir, "/", storage::kLatestName),
                                     absl::StrCat(step, "\n"));
    if (s.ok()) break;
  }
  return s;
}

// Step 4-5: the step becomes visible. A filesystem renames the partial
// directory and makes that durable (undone on failure); an object store
// creates the step's commit object, once: a second commit of the step is
// refused by the server where it honours conditional creates, else by the
// backend's read-back (storage/s3/s3_backend.h).
absl::Status MakeVisible(storage::Backend& backend, const std::string& job_dir,
                         const std::string& partial_dir, const std::string& step_dir,
                         const std::string& manifest_bytes) {
  if (backend.IsObjectStore()) {
    storage::CommitRecord record;
    record.dir = partial_dir.substr(job_dir.size() + 1);
    record.manifest_bytes = manifest_bytes.size();
    record.manifest_crc32c = Crc32c(manifest_bytes.data(), manifest_bytes.size());
    const std::string commit_path = absl::StrCat(step_dir, "/", storage::kCommitName);
    const std::string contents = storage::EncodeCommitRecord(record);
    const absl::Status created = backend.CreateFileExclusive(commit_path, contents);
    if (created.ok()) return created;
    // The create may have landed with its answer lost (a retry then finds
    // it "exists"): what the store holds decides.
    absl::StatusOr<std::string> held =
        storage::ReadWholeFile(backend, commit_path, storage::kMaxCommitBytes);
    if (held.ok() && *held == contents) return absl::OkStatus();
    // Not there: a clean failure, unless the create timed out or lost its
    // connection, when the PUT may still land after this read.
    const bool in_doubt = absl::IsUnavailable(created) || absl::IsDeadlineExceeded(created);
    if (held.ok() || (absl::IsNotFound(held.status()) && !in_doubt)) return created;
    absl::Status unknown = absl::UnavailableError(
        absl::StrCat(created.message(), "; whether ", commit_path, " was written cannot be told (",
                     held.status().message(), "): the files are kept"));
    unknown.SetPayload(kCommitOutcomeUnknown, absl::Cord("1"));
    return unknown;
  }
  if (absl::Status s = backend.Rename(partial_dir, step_dir); !s.ok()) return s;
  if (absl::Status s = backend.SyncDir(job_dir); !s.ok()) {
    // Not committed, so not visible either: the caller aborts this save and
    // must not find it later as the latest step (nor be refused a retry).
    (void)backend.Rename(step_dir, partial_dir);
    return s;
  }
  return absl::OkStatus();
}

}  // namespace

ManifestFiles FilesOfSplit(std::string job, int64_t step, planning::SplitManifestFiles split) {
  ManifestFiles files;
  files.job = std::move(job);
  files.step = step;
  files.manifest = std::move(split.root);
  files.tables = absl::StrJoin(split.tables, "");
  return files;
}

ManifestFiles EncodeForCommit(const v1::CheckpointManifest& manifest,
                              const ManifestWriting& writing) {
  uint64_t chunks = 0;
  if (writing.split_min_chunks > 0) {
    for (const v1::TensorEntry& tensor : manifest.tensors()) {
      for (const v1::StoredShard& shard : tensor.shards()) chunks += shard.chunks_size();
    }
  }
  if (writing.split_min_chunks > 0 && chunks >= writing.split_min_chunks) {
    std::optional<planning::SplitManifestFiles> split =
        planning::SplitManifest(manifest, writing.limits);
    if (split.has_value()) return FilesOfSplit(manifest.job(), manifest.step(), *std::move(split));
  }
  ManifestFiles files;
  files.job = manifest.job();
  files.step = manifest.step();
  files.manifest = planning::EncodeManifest(manifest);
  return files;
}

bool CommitOutcomeUnknown(const absl::Status& status) {
  return status.GetPayload(kCommitOutcomeUnknown).has_value();
}

absl::StatusOr<std::optional<int64_t>> CommittedIntent(storage::Backend& backend,
                                                       const std::string& root,
                                                       const std::string& job) {
  absl::StatusOr<std::string> contents = storage::ReadWholeFile(
      backend, absl::StrCat(storage::JobDir(root, job), "/", storage::kLatestIntentName),
      storage::kMaxLatestBytes);
  if (!contents.ok()) return std::optional<int64_t>();  // missing, or too long to be ours
  const std::optional<int64_t> step = storage::ParseLatestContents(*contents);
  if (!step.has_value()) return std::optional<int64_t>();
  absl::StatusOr<bool> committed = storage::StepCommitted(backend, root, job, *step);
  if (!committed.ok()) return committed.status();
  return *committed ? step : std::nullopt;
}

absl::StatusOr<std::optional<int64_t>> RepairLatest(storage::Backend& backend,
                                                    const std::string& root,
                                                    const std::string& job) {
  const std::string job_dir = storage::JobDir(root, job);
  const std::string intent_path = absl::StrCat(job_dir, "/", storage::kLatestIntentName);
  absl::StatusOr<bool> has_intent = backend.Exists(intent_path);
  if (!has_intent.ok()) return has_intent.status();
  if (!*has_intent) return std::optional<int64_t>();
  absl::StatusOr<std::optional<int64_t>> step = CommittedIntent(backend, root, job);
  if (!step.ok()) return step.status();
  if (step->has_value()) {
    if (absl::Status s = WriteLatest(backend, job_dir, **step); !s.ok()) {
      return WithContext(s, absl::StrCat("repair of LATEST of job ", job));
    }
  }
  // Gone or not, it no longer means anything: LATEST says it all.
  if (absl::Status s = backend.RemoveAll(intent_path); !s.ok()) {
    return WithContext(s, absl::StrCat("repair of LATEST of job ", job));
  }
  return *step;
}

absl::Status CommitCheckpoint(storage::Backend& backend, const std::string& root,
                              const std::string& partial_dir,
                              const v1::CheckpointManifest& manifest, bool make_latest,
                              const std::function<absl::Status()>& commit_point,
                              const ManifestWriting& writing) {
  return CommitCheckpoint(backend, root, partial_dir, EncodeForCommit(manifest, writing),
                          make_latest, commit_point);
}

absl::Status CommitCheckpoint(storage::Backend& backend, const std::string& root,
                              const std::string& partial_dir, const ManifestFiles& files,
                              bool make_latest, const std::function<absl::Status()>& commit_point) {
  const std::string& job = files.job;
  const int64_t step = files.step;
  const std::string job_dir = storage::JobDir(root, job);
  const std::string step_dir = storage::StepDir(root, job, step);
  const std::string intent_path = absl::StrCat(job_dir, "/", storage::kLatestIntentName);
  // For the log; returned errors say only "commit": the caller names the save.
  const std::string what = absl::StrCat("commit of ", job, " step ", step);
  constexpr absl::string_view kCommit = "commit";

  // A LATEST.next left by an earlier commit is folded in first, so that
  // writing ours cannot erase what it knew. If LATEST still cannot be
  // written, this save goes on (LATEST is not part of the commit point), and
  // should it fail before its rename the earlier intent is put back.
  std::optional<int64_t> pending;
  if (absl::Status s = RepairLatest(backend, root, job).status(); !s.ok()) {
    std::fprintf(stderr, "ckptd: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
    absl::StatusOr<std::optional<int64_t>> intent = CommittedIntent(backend, root, job);
    if (intent.ok()) pending = *intent;
  }
  const auto undo_intent = [&] {
    if (pending.has_value()) {
      (void)WriteSynced(backend, intent_path, absl::StrCat(*pending, "\n"));
    } else {
      (void)backend.RemoveAll(intent_path);  // names no committed step: harmless if it stays
    }
  };
  if (absl::Status s = backend.SyncDir(absl::StrCat(partial_dir, "/data")); !s.ok()) {
    return WithContext(s, kCommit);
  }
  if (files.tables.has_value()) {
    if (absl::Status s = WriteSynced(
            backend, absl::StrCat(partial_dir, "/", planning::kChunkTablesFile), *files.tables);
        !s.ok()) {
      return WithContext(s, kCommit);
    }
  }
  const std::string& manifest_bytes = files.manifest;
  if (absl::Status s = WriteSynced(backend, absl::StrCat(partial_dir, "/", storage::kManifestName),
                                   manifest_bytes);
      !s.ok()) {
    return WithContext(s, kCommit);
  }
  if (absl::Status s = backend.SyncDir(partial_dir); !s.ok()) return WithContext(s, kCommit);
  FaultPoint("commit.before_rename");
  if (commit_point != nullptr) {
    if (absl::Status s = commit_point(); !s.ok()) return s;
  }

  absl::StatusOr<bool> exists = storage::StepCommitted(backend, root, job, step);
  if (!exists.ok()) return WithContext(exists.status(), kCommit);
  if (*exists) return absl::AlreadyExistsError(absl::StrCat(kCommit, ": ", step_dir, " exists"));
  absl::Status intent = absl::OkStatus();
  if (make_latest) {
    intent = WriteSynced(backend, intent_path, absl::StrCat(step, "\n"));
    if (intent.ok()) intent = backend.SyncDir(job_dir);
  }
  if (!intent.ok()) {
    undo_intent();
    return WithContext(intent, kCommit);
  }
  if (absl::Status s = MakeVisible(backend, job_dir, partial_dir, step_dir, manifest_bytes);
      !s.ok()) {
    undo_intent();
    return WithContext(s, kCommit);
  }
  FaultPoint("commit.after_rename");

  // Committed. What follows is repaired, never reported as a failed save.
  if (!make_latest) return absl::OkStatus();
  if (absl::Status s = WriteLatest(backend, job_dir, step); !s.ok()) {
    std::fprintf(stderr,
                 "ckptd: %s: committed, but LATEST could not be written (%s); %s names the "
                 "step, so it is latest, and LATEST is repaired before the next commit or "
                 "at start-up\n",
                 what.c_str(), std::string(s.message()).c_str(), intent_path.c_str());
    return absl::OkStatus();
  }
  if (absl::Status s = backend.RemoveAll(intent_path); !s.ok()) {
    // Harmless: it names the step LATEST names.
    std::fprintf(stderr, "ckptd: %s: could not remove %s: %s\n", what.c_str(), intent_path.c_str(),
                 std::string(s.message()).c_str());
  }
  return absl::OkStatus();
}

}  // namespace ckpt::coordinator
