#include "daemon/coordinator/retention.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/fault/fault_points.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/step_location.h"
#include "proto/lib/status_context.h"
#include "proto/lib/validation.h"

namespace ckpt::coordinator {
namespace {

// Deeper than any step directory (step-N/data/<file>); a hostile tree
// deeper than this is still removed, only not measured.
constexpr int kMaxMeasuredDepth = 4;

// The bytes of the files under path (best effort: unreadable entries count 0).
uint64_t TreeBytes(storage::Backend& backend, const std::string& path, int depth) {
  absl::StatusOr<std::vector<std::string>> entries = backend.ListDir(path);
  // An object store lists a file as an empty directory.
  if (!entries.ok() || entries->empty()) {
    absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file = backend.NewReadableFile(path);
    if (!file.ok()) return 0;
    absl::StatusOr<uint64_t> size = (*file)->Size();
    return size.ok() ? *size : 0;
  }
  if (depth >= kMaxMeasuredDepth) return 0;
  uint64_t total = 0;
  for (const std::string& entry : *entries) {
    total += TreeBytes(backend, absl::StrCat(path, "/", entry), depth + 1);
  }
  return total;
}

// Step 3 of the protocol: the data files one by one (the fault point lands
// with some gone and some not), then the rest.
absl::Status RemoveTrash(storage::Backend& backend, const std::string& trash) {
  const std::string data = absl::StrCat(trash, "/data");
  absl::StatusOr<std::vector<std::string>> files = backend.ListDir(data);
  if (files.ok()) {
    for (const std::string& file : *files) {
      if (absl::Status s = backend.RemoveAll(absl::StrCat(data, "/", file)); !s.ok()) return s;
      FaultPoint("gc.mid_remove");
    }
  }
  return backend.RemoveAll(trash);
}

std::string StepList(const std::vector<int64_t>& steps) {
  return steps.empty() ? "none" : absl::StrJoin(steps, ", ");
}

void Log(const std::string& line) { std::fprintf(stderr, "ckptd: %s\n", line.c_str()); }

}  // namespace

absl::StatusOr<std::unique_ptr<storage::FileLock>> PinStep(storage::Backend& backend,
                                                           const std::string& root,
                                                           const std::string& job, int64_t step) {
  return backend.LockFile(storage::StepPinPath(backend, root, job, step),
                          storage::LockMode::kShared, /*wait=*/true);
}

bool GcResult::failed() const {
  return std::any_of(steps.begin(), steps.end(),
                     [](const GcStep& s) { return s.outcome == GcStep::Outcome::kFailed; });
}

GarbageCollector::GarbageCollector(storage::Backend& backend, Catalog& catalog)
    : backend_(backend), catalog_(catalog) {}

void GarbageCollector::RemoveLeftoverTrash(const std::string& job) {
  const std::string job_dir = storage::JobDir(catalog_.root(), job);
  absl::StatusOr<std::vector<std::string>> entries = backend_.ListDir(job_dir);
  if (!entries.ok()) return;
  std::vector<std::string> trash;
  for (const std::string& entry : *entries) {
    const std::optional<storage::PartialDirName> owned = storage::ParseTrashDirName(entry);
    // Another host's may be being removed by its daemon right now.
    if (owned && owned->host == catalog_.host()) trash.push_back(absl::StrCat(job_dir, "/", entry));
  }
  if (trash.empty()) return;
  // The renames must be durable before their files go (protocol step 2).
  absl::Status s = backend_.SyncDir(job_dir);
  for (size_t i = 0; s.ok() && i < trash.size(); ++i) s = backend_.RemoveAll(trash[i]);
  Log(s.ok() ? absl::StrCat("gc of job ", job, ": removed ", trash.size(),
                            " trash directories an earlier gc left")
             : absl::StrCat("gc of job ", job,
                            ": cannot remove trash an earlier gc left: ", s.message()));
}

absl::StatusOr<GcResult> GarbageCollector::Collect(const std::string& job,
                                                   const planning::RetentionPolicy& policy,
                                                   bool dry_run, absl::Time now,
                                                   absl::string_view trigger) {
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  const std::string what = absl::StrCat("gc of job ", job);
  absl::MutexLock lock(&mu_);
  const std::string job_dir = storage::JobDir(catalog_.root(), job);
  absl::StatusOr<bool> exists = backend_.Exists(job_dir);
  if (!exists.ok()) return WithContext(exists.status(), what);
  if (!*exists) {
    return absl::NotFoundError(
        absl::StrCat("job ", job, " has no checkpoints under ", catalog_.root()));
  }
  if (!dry_run) RemoveLeftoverTrash(job);

  absl::StatusOr<std::vector<v1::CheckpointSummary>> summaries = catalog_.ListCheckpoints(job);
  if (!summaries.ok()) return WithContext(summaries.status(), what);
  const bool any_valid =
      std::any_of(summaries->begin(), summaries->end(), [](const auto& c) { return !c.broken(); });
  const bool any_latest =
      std::any_of(summaries->begin(), summaries->end(), [](const auto& c) { return c.latest(); });
  if (any_valid && !any_latest) {
    // Deleting without knowing what is latest could delete it.
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": cannot tell which step is latest; nothing deleted"));
  }

  std::vector<planning::StepFacts> facts;
  std::map<int64_t, std::unique_ptr<storage::FileLock>> locks;
  for (const v1::CheckpointSummary& c : *summaries) {
    planning::StepFacts& f = facts.emplace_back();
    f.step = c.step();
    f.latest = c.latest();
    f.broken = c.broken();
    f.broken_reason = c.broken_reason();
    if (c.has_delta_base_step()) f.delta_base = c.delta_base_step();
    // The later of the manifest's time (the save's start) and the
    // directory's (its MANIFEST was written at commit): the younger guess.
    const std::string dir = storage::StepDir(catalog_.root(), job, c.step());
    absl::StatusOr<absl::Time> modified = backend_.ModifiedTime(dir);
    if (modified.ok()) f.committed = *modified;
    if (c.created_unix_ms() > 0) {
      const absl::Time created = absl::FromUnixMillis(c.created_unix_ms());
      f.committed = f.committed ? std::max(*f.committed, created) : created;
    }
    if (f.latest) continue;  // never deleted: no lock needed
    absl::StatusOr<std::unique_ptr<storage::FileLock>> pin =
        backend_.LockFile(storage::StepPinPath(backend_, catalog_.root(), job, c.step()),
                          storage::LockMode::kExclusive, /*wait=*/false);
    if (pin.ok()) {
      locks[c.step()] = std::move(*pin);
    } else if (absl::IsUnavailable(pin.status())) {
      f.in_use = "in use: a load or an export holds its pin";
    } else if (!absl::IsNotFound(pin.status())) {
      f.in_use = absl::StrCat("cannot tell whether it is in use: ", pin.status().message());
    }
  }

  // A save of deltas pins its base until it commits (delta_base.h): one
  // that committed between the listing and the locks above is seen now,
  // and the base it needs is kept. Later ones wait for the locks, then
  // find their base gone and store whole steps.
  if (!locks.empty()) {
    absl::StatusOr<std::vector<v1::CheckpointSummary>> again = catalog_.ListCheckpoints(job);
    std::set<int64_t> listed;
    for (const v1::CheckpointSummary& c : *summaries) listed.insert(c.step());
    for (const v1::CheckpointSummary& c : again.ok() ? *again : *summaries) {
      if (listed.count(c.step()) > 0 || !c.has_delta_base_step()) continue;
      for (planning::StepFacts& f : facts) {
        if (f.step == c.step()) continue;
        if (f.step == c.delta_base_step() && f.in_use.empty()) {
          f.in_use = absl::StrCat("the base of step ", c.step(), ", committed as gc ran");
        }
      }
    }
    if (!again.ok()) {
      // Not knowing what committed meanwhile, nothing a new delta may need goes.
      for (planning::StepFacts& f : facts) {
        if (f.in_use.empty()) f.in_use = absl::StrCat("cannot tell: ", again.status().message());
      }
    }
  }
  const std::vector<planning::StepDecision> decisions =
      planning::DecideRetention(policy, facts, now);
  GcResult result;
  std::vector<std::pair<size_t, std::string>> renamed;  // index in result.steps, trash path
  for (size_t i = 0; i < decisions.size(); ++i) {
    const planning::StepDecision& d = decisions[i];
    GcStep& out = result.steps.emplace_back();
    out.step = d.step;
    out.reason = d.reason;
    std::string dir = storage::StepDir(catalog_.root(), job, d.step);
    if (backend_.IsObjectStore()) {
      // The files are where the COMMIT says; without it, nothing to delete.
      absl::StatusOr<std::string> data =
          storage::ResolveStepDir(backend_, catalog_.root(), job, d.step);
      if (data.ok()) {
        dir = *data;
      } else if (!d.keep && !absl::IsNotFound(data.status())) {
        // Deleting the COMMIT without knowing its files would strand them.
        out.outcome = GcStep::Outcome::kFailed;
        out.reason = absl::StrCat("not deleted: ", data.status().message());
        locks.erase(d.step);
        continue;
      }
    }
    if (d.keep) {
      locks.erase(d.step);
      out.bytes = (*summaries)[i].bytes();
      continue;
    }
    out.outcome = GcStep::Outcome::kDeleted;
    out.bytes = TreeBytes(backend_, dir, 0);
    if (dry_run) {
      locks.erase(d.step);
      continue;
    }
    if (backend_.IsObjectStore()) {
      // No rename: the step ends when its COMMIT goes, and its files are
      // then an uncommitted partial directory (removed below, or by a
      // restart of the host that wrote it).
      if (absl::Status s = backend_.RemoveAll(storage::CommitPath(catalog_.root(), job, d.step));
          !s.ok()) {
        out.outcome = GcStep::Outcome::kFailed;
        out.reason = absl::StrCat("not deleted: ", s.message());
        continue;
      }
      // The step's pins' leases (of holders that died, and this gc's own)
      // go with it: left behind, they would keep step-N/ listed.
      (void)backend_.RemoveAll(storage::StepDir(catalog_.root(), job, d.step));
      renamed.emplace_back(result.steps.size() - 1, dir);
      continue;
    }
    const std::string trash =
        storage::TrashDir(catalog_.root(), job, d.step, catalog_.NewPartialId());
    if (absl::Status s = backend_.Rename(dir, trash); !s.ok()) {
      out.outcome = GcStep::Outcome::kFailed;
      out.reason = absl::StrCat("not deleted: ", s.message());
      continue;
    }
    renamed.emplace_back(result.steps.size() - 1, trash);
  }
  if (!renamed.empty()) {
    absl::Status synced = backend_.SyncDir(job_dir);
    FaultPoint("gc.after_rename");
    // Durable (or not, and then kept as trash): readers waiting on a pin
    // may go on and find the step gone.
    locks.clear();
    for (const auto& [index, trash] : renamed) {
      GcStep& out = result.steps[index];
      absl::Status s = synced.ok() ? RemoveTrash(backend_, trash) : synced;
      if (s.ok()) {
        result.bytes_freed += out.bytes;
        continue;
      }
      out.outcome = GcStep::Outcome::kFailed;
      out.reason = absl::StrCat("moved to ", trash, " but not removed (", s.message(),
                                "); the next gc of the job or a restart removes it");
    }
  }
  if (dry_run) {
    for (const GcStep& s : result.steps) {
      if (s.outcome == GcStep::Outcome::kDeleted) result.bytes_freed += s.bytes;
    }
  }

  std::vector<int64_t> deleted, kept, failed;
  for (const GcStep& s : result.steps) {
    (s.outcome == GcStep::Outcome::kDeleted ? deleted
     : s.outcome == GcStep::Outcome::kKept  ? kept
                                            : failed)
        .push_back(s.step);
  }
  std::string line = absl::StrCat(what, " (", trigger, dry_run ? ", dry run" : "",
                                  "): ", dry_run ? "would delete" : "deleted", " steps [",
                                  StepList(deleted), "], ", result.bytes_freed, " bytes ",
                                  dry_run ? "to free" : "freed", "; kept [", StepList(kept), "]");
  if (!failed.empty()) absl::StrAppend(&line, "; failed [", StepList(failed), "]");
  Log(line);
  return result;
}

}  // namespace ckpt::coordinator
