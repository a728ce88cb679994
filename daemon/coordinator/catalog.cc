#include "daemon/coordinator/catalog.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/layout.h"
#include "daemon/coordinator/manifest_io.h"
#include "proto/lib/validation.h"

namespace ckpt::coordinator {

Catalog::Catalog(storage::Backend& backend, std::string root)
    : backend_(backend), root_(std::move(root)) {}

absl::StatusOr<int> Catalog::RemoveStalePartials() {
  absl::StatusOr<std::vector<std::string>> jobs = backend_.ListDir(root_);
  if (!jobs.ok()) return jobs.status();
  int removed = 0;
  for (const std::string& job : *jobs) {
    absl::StatusOr<std::vector<std::string>> entries = backend_.ListDir(JobDir(root_, job));
    if (!entries.ok()) continue;  // a file, not a job directory
    for (const std::string& entry : *entries) {
      if (!IsPartialDirName(entry)) continue;
      const std::string path = absl::StrCat(JobDir(root_, job), "/", entry);
      if (absl::Status s = backend_.RemoveAll(path); !s.ok()) return s;
      ++removed;
    }
    if (removed > 0) {
      if (absl::Status s = backend_.SyncDir(JobDir(root_, job)); !s.ok()) return s;
    }
  }
  return removed;
}

absl::StatusOr<std::vector<int64_t>> Catalog::ListSteps(const std::string& job) {
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  absl::StatusOr<std::vector<std::string>> entries = backend_.ListDir(JobDir(root_, job));
  if (absl::IsNotFound(entries.status())) return std::vector<int64_t>{};
  if (!entries.ok()) return entries.status();
  std::vector<int64_t> steps;
  for (const std::string& entry : *entries) {
    if (std::optional<int64_t> step = ParseStepDirName(entry)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<bool> Catalog::StepExists(const std::string& job, int64_t step) {
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  return backend_.Exists(StepDir(root_, job, step));
}

absl::StatusOr<int64_t> Catalog::ResolveStep(const std::string& job, int64_t step) {
  if (step >= 0) {
    absl::StatusOr<bool> exists = StepExists(job, step);
    if (!exists.ok()) return exists.status();
    if (!*exists) {
      return absl::NotFoundError(absl::StrCat("job ", job, " has no committed step ", step));
    }
    return step;
  }
  if (step != -1) return absl::InvalidArgumentError(absl::StrCat("step ", step, " is negative"));
  // The newest step directory is the truth; LATEST is written after the
  // commit point and may lag it by one crash.
  absl::StatusOr<std::vector<int64_t>> steps = ListSteps(job);
  if (!steps.ok()) return steps.status();
  if (steps->empty()) {
    return absl::NotFoundError(absl::StrCat("job ", job, " has no committed checkpoint"));
  }
  return steps->back();
}

absl::StatusOr<v1::CheckpointManifest> Catalog::ReadManifest(const std::string& job,
                                                             int64_t step) {
  absl::StatusOr<int64_t> resolved = ResolveStep(job, step);
  if (!resolved.ok()) return resolved.status();
  const std::string path = absl::StrCat(StepDir(root_, job, *resolved), "/", kManifestName);
  absl::StatusOr<std::string> bytes = storage::ReadWholeFile(backend_, path);
  if (!bytes.ok()) return bytes.status();
  return DecodeManifest(*bytes, path);
}

}  // namespace ckpt::coordinator
