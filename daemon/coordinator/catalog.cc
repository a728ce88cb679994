#include "daemon/coordinator/catalog.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/coordinator/commit.h"
#include "daemon/planning/column_manifest_read.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/step_location.h"
#include "proto/lib/secure_random.h"
#include "proto/lib/stored_chunk.h"
#include "proto/lib/validation.h"

namespace ckpt::coordinator {
namespace {

std::string SafeHost(std::string host) {
  if (host.empty()) {
    char name[HOST_NAME_MAX + 1] = {};
    host = gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  for (char& c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      c = '_';
    }
  }
  return host;
}

bool IsInstanceId(const std::string& id) {
  return id.size() == storage::kInstanceIdLength && std::all_of(id.begin(), id.end(), [](char c) {
           return absl::ascii_isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

// From the kernel's CSPRNG, as every other id a host may be named by.
std::string RandomInstanceId() {
  uint64_t id = 0;
  FillRandom(&id, sizeof id);
  return absl::StrFormat("%016x", id);
}

void Log(const std::string& line) { std::fprintf(stderr, "ckptd: %s\n", line.c_str()); }

// A broken step reads as DATA_LOSS or FAILED_PRECONDITION, never NOT_FOUND:
// the step exists, what is missing is inside it.
absl::Status AsBroken(const absl::Status& s) {
  if (absl::IsNotFound(s)) return absl::DataLossError(s.message());
  return s;
}

}  // namespace

Catalog::Catalog(storage::Backend& backend, std::string root, CatalogOptions options)
    : backend_(backend),
      root_(std::move(root)),
      host_(SafeHost(std::move(options.host))),
      instance_(IsInstanceId(options.instance) ? options.instance : RandomInstanceId()),
      limits_(options.limits),
      split_manifest_min_chunks_(options.split_manifest_min_chunks),
      files_elsewhere_(options.files_elsewhere),
      read_slots_(options.read_slots != nullptr ? std::move(options.read_slots)
                                                : std::make_shared<ManifestReadSlots>()) {}

std::string Catalog::NewPartialId() {
  return storage::PartialId(host_, instance_,
                            next_partial_.fetch_add(1, std::memory_order_relaxed));
}

absl::StatusOr<int> Catalog::RemoveStalePartials() {
  absl::StatusOr<std::vector<std::string>> jobs = backend_.ListDir(root_);
  if (!jobs.ok()) return jobs.status();
  int removed = 0;
  for (const std::string& job : *jobs) {
    if (!ValidateName("job", job).ok()) continue;
    const std::string job_dir = storage::JobDir(root_, job);
    absl::StatusOr<std::vector<std::string>> entries = backend_.ListDir(job_dir);
    if (!entries.ok()) continue;  // a file, not a job directory
    // A partial directory of a killed daemon on an object store may hold
    // only unfinished uploads, which no listing of objects shows.
    absl::StatusOr<std::vector<std::string>> unfinished = backend_.ListUnfinishedFiles(job_dir);
    if (!unfinished.ok()) return unfinished.status();
    for (const std::string& path : *unfinished) {
      const std::string rest = path.substr(std::min(path.size(), job_dir.size() + 1));
      const std::string entry = rest.substr(0, rest.find('/'));
      if (!std::binary_search(entries->begin(), entries->end(), entry)) {
        entries->insert(std::lower_bound(entries->begin(), entries->end(), entry), entry);
      }
    }
    int removed_here = 0;
    std::vector<std::string> trash;
    for (const std::string& entry : *entries) {
      // A step an earlier gc of this host renamed to trash and did not
      // finish removing (retention.h); another host's may be in progress.
      const std::optional<storage::PartialDirName> deleting = storage::ParseTrashDirName(entry);
      if (deleting && deleting->host == host_ && deleting->instance != instance_) {
        trash.push_back(absl::StrCat(job_dir, "/", entry));
      }
      const std::optional<storage::PartialDirName> partial = storage::ParsePartialDirName(entry);
      // Another host's may be a save in flight on a shared root; an unnamed
      // one (older versions) cannot be told apart from one: both stay.
      if (!partial || partial->host != host_ || partial->instance == instance_) continue;
      const std::string path = absl::StrCat(job_dir, "/", entry);
      // On an object store a committed step's files stay in the partial
      // directory its COMMIT names.
      if (backend_.IsObjectStore()) {
        absl::StatusOr<std::string> committed =
            storage::ResolveStepDir(backend_, root_, job, partial->step);
        // Unsure (the store did not answer): kept, for the next restart.
        if (!committed.ok() && !absl::IsNotFound(committed.status())) continue;
        if (committed.ok() && *committed == path) continue;
      }
      if (absl::Status s = backend_.RemoveAll(path); !s.ok()) return s;
      ++removed_here;
    }
    if (removed_here > 0 || !trash.empty()) {
      // Also makes the renames to trash durable before their files go.
      if (absl::Status s = backend_.SyncDir(job_dir); !s.ok()) return s;
    }
    for (const std::string& path : trash) {
      if (absl::Status s = backend_.RemoveAll(path); !s.ok()) return s;
    }
    if (!trash.empty()) {
      Log(absl::StrCat("job ", job, ": finished deleting ", trash.size(),
                       " steps an interrupted gc had moved to trash"));
    }
    removed += removed_here;
    // A coordinator elected through etcd may be committing this job right
    // now (its LATEST.next is not a crash's): the repair waits for no one,
    // and is left to that commit, which repairs before it writes.
    std::unique_ptr<storage::FileLock> fence;
    const std::string fence_path = absl::StrCat(job_dir, "/", storage::kFenceLockName);
    if (absl::StatusOr<bool> fenced = backend_.Exists(fence_path); fenced.ok() && *fenced) {
      absl::StatusOr<std::unique_ptr<storage::FileLock>> lock =
          backend_.LockFile(fence_path, storage::LockMode::kExclusive, /*wait=*/false);
      if (!lock.ok()) continue;
      fence = std::move(*lock);
    }
    absl::StatusOr<std::optional<int64_t>> repaired = RepairLatest(backend_, root_, job);
    if (!repaired.ok()) return repaired.status();
    if (repaired->has_value()) {
      Log(absl::StrCat("job ", job, ": step ", **repaired,
                       " was committed but LATEST did not name it yet; LATEST repaired"));
    }
  }
  return removed;
}

absl::StatusOr<std::vector<int64_t>> Catalog::ListSteps(const std::string& job) {
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  absl::StatusOr<std::vector<std::string>> entries = backend_.ListDir(storage::JobDir(root_, job));
  if (absl::IsNotFound(entries.status())) return std::vector<int64_t>{};
  if (!entries.ok()) return entries.status();
  std::vector<int64_t> steps;
  for (const std::string& entry : *entries) {
    if (std::optional<int64_t> step = storage::ParseStepDirName(entry)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<bool> Catalog::StepExists(const std::string& job, int64_t step) {
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  return storage::StepCommitted(backend_, root_, job, step);
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
  if (absl::Status s = ValidateName("job", job); !s.ok()) return s;
  return ResolveLatest(job);
}

absl::StatusOr<int64_t> Catalog::ResolveLatest(const std::string& job) {
  absl::StatusOr<std::optional<int64_t>> intent = CommittedIntent(backend_, root_, job);
  if (!intent.ok()) return intent.status();
  if (intent->has_value()) return **intent;

  const std::string latest_path =
      absl::StrCat(storage::JobDir(root_, job), "/", storage::kLatestName);
  absl::StatusOr<std::string> contents =
      storage::ReadWholeFile(backend_, latest_path, storage::kMaxLatestBytes);
  std::string why;
  if (contents.ok()) {
    if (const std::optional<int64_t> named = storage::ParseLatestContents(*contents)) {
      absl::StatusOr<bool> exists = storage::StepCommitted(backend_, root_, job, *named);
      if (!exists.ok()) return exists.status();
      if (*exists) return *named;
      why = absl::StrCat("names step ", *named, ", which does not exist");
    } else {
      why = "does not hold a step number";
    }
  } else if (absl::IsNotFound(contents.status())) {
    why = "is missing";
  } else {
    why = absl::StrCat("cannot be read (", contents.status().message(), ")");
  }

  absl::StatusOr<std::vector<int64_t>> steps = ListSteps(job);
  if (!steps.ok()) return steps.status();
  if (steps->empty()) {
    return absl::NotFoundError(absl::StrCat("job ", job, " has no committed checkpoint"));
  }
  absl::Status newest_error;
  for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
    absl::StatusOr<v1::CheckpointManifest> manifest = ReadStepManifest(job, *it);
    if (manifest.ok()) {
      Log(absl::StrCat("job ", job, ": ", latest_path, " ", why, "; latest is step ", *it,
                       ", the highest whose manifest validates"));
      return *it;
    }
    if (newest_error.ok()) newest_error = manifest.status();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("job ", job, ": ", latest_path, " ", why, ", and none of its ", steps->size(),
                   " step directories has a valid manifest (step ", steps->back(), ": ",
                   newest_error.message(), ")"));
}

template <typename Finish>
auto Catalog::ReadStep(const std::string& job, int64_t step, const Finish& finish)
    -> decltype(finish(v1::CheckpointManifest(), planning::ManifestFootprint(), uint64_t{0},
                       std::string(), planning::ChunkTablesReader())) {
  absl::StatusOr<storage::ResolvedStep> resolved = storage::ResolveStep(backend_, root_, job, step);
  if (!resolved.ok()) return AsBroken(resolved.status());
  const std::string& dir = resolved->dir;
  const std::string path = absl::StrCat(dir, "/", storage::kManifestName);
  // From the file's size to its validation, within a slot: a read holds up
  // to --max_manifest_memory_bytes meanwhile (manifest_read_slots.h).
  const ManifestReadSlots::Slot slot(*read_slots_);
  absl::StatusOr<std::string> bytes = ReadManifestFile(dir, path);
  if (!bytes.ok()) return AsBroken(bytes.status());
  if (absl::Status s = storage::CheckCommittedManifest(*resolved, *bytes, path); !s.ok()) return s;
  planning::ManifestFootprint footprint;
  absl::StatusOr<v1::CheckpointManifest> manifest =
      planning::DecodeBoundedManifest(*bytes, path, limits_, &footprint);
  if (!manifest.ok()) return manifest.status();
  const uint64_t size = bytes->size();
  bytes = std::string();  // decoded: not held while the tables are read
  return finish(*std::move(manifest), footprint, size, path,
                [&](uint64_t offset, uint64_t length, uint64_t total) {
                  return ReadTables(dir, offset, length, total);
                });
}

absl::StatusOr<v1::CheckpointManifest> Catalog::ReadStepManifest(const std::string& job,
                                                                 int64_t step) {
  return ReadStep(
      job, step,
      [&](v1::CheckpointManifest manifest, const planning::ManifestFootprint& footprint,
          uint64_t size, const std::string& path, const planning::ChunkTablesReader& read_tables)
          -> absl::StatusOr<v1::CheckpointManifest> {
        // A split manifest: its chunk tables, each checked
        // against the root, joined in.
        if (absl::Status s =
                planning::JoinChunkTables(manifest, footprint, size, path, limits_, read_tables);
            !s.ok()) {
          return AsBroken(s);
        }
        if (absl::Status s = planning::ValidateManifest(manifest, job, step, path, limits_);
            !s.ok()) {
          return s;
        }
        return manifest;
      });
}

absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> Catalog::ReadStepColumns(
    const std::string& job, int64_t step) {
  return ReadStep(
      job, step,
      [&](v1::CheckpointManifest manifest, const planning::ManifestFootprint& footprint,
          uint64_t size, const std::string& path, const planning::ChunkTablesReader& read_tables)
          -> absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> {
        absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> columns =
            planning::ReadColumnManifest(std::move(manifest), footprint, size, job, step, path,
                                         limits_, read_tables);
        if (!columns.ok()) return AsBroken(columns.status());
        return columns;
      });
}

absl::StatusOr<std::string> Catalog::ReadManifestFile(const std::string& dir,
                                                      const std::string& path) {
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file =
      backend_.OpenReadOnlyBeneath(dir, storage::kManifestName);
  if (!file.ok()) return file.status();
  absl::StatusOr<uint64_t> size = (*file)->Size();
  if (!size.ok()) return size.status();
  for (const auto& [limit, flag] :
       {std::pair{limits_.max_manifest_bytes, "--max_manifest_bytes"},
        std::pair{limits_.max_memory_bytes, "--max_manifest_memory_bytes"}}) {
    if (*size > limit) {
      return absl::FailedPreconditionError(absl::StrCat(path, " is ", *size,
                                                        " bytes, more than the limit of ", limit,
                                                        " (", flag, "); it was not read"));
    }
  }
  std::string bytes(*size, '\0');
  if (*size > 0) {
    storage::IoOp op{0, bytes.data(), bytes.size()};
    if (absl::Status s = (*file)->ReadBatch({&op, 1}); !s.ok()) return s;
  }
  return bytes;
}

absl::StatusOr<std::string> Catalog::ReadTables(const std::string& dir, uint64_t offset,
                                                uint64_t length, uint64_t total) {
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file =
      backend_.OpenReadOnlyBeneath(dir, planning::kChunkTablesFile);
  if (!file.ok()) return file.status();
  absl::StatusOr<uint64_t> size = (*file)->Size();
  if (!size.ok()) return size.status();
  if (*size != total) {
    return absl::DataLossError(absl::StrCat(dir, "/", planning::kChunkTablesFile, " is ", *size,
                                            " bytes; its manifest lists ", total));
  }
  if (offset > total || length > total - offset) {
    return absl::DataLossError(absl::StrCat(dir, "/", planning::kChunkTablesFile, ": ", length,
                                            " bytes at ", offset, " asked of ", total));
  }
  // Bounded by the root's checks (JoinChunkTables), within the file.
  std::string bytes(length, '\0');
  storage::IoOp op{offset, bytes.data(), bytes.size()};
  if (absl::Status s = (*file)->ReadBatch({&op, 1}); !s.ok()) return s;
  return bytes;
}

absl::Status Catalog::CheckDataFiles(const std::string& job, int64_t step,
                                     const v1::CheckpointManifest& manifest) {
  // The end each file must reach; the manifest was validated, so no sum wraps.
  std::map<std::string, std::pair<uint64_t, std::string>> needed;  // file -> end, owner
  (void)planning::ForEachChunk(manifest, [&](const v1::StoredChunk& c, const std::string& owner) {
    if (c.length() == 0) return absl::OkStatus();
    auto& [end, who] = needed[c.file()];
    // An encoded chunk's place may end in a hole the file never reaches.
    if (c.file_offset() + StoredLength(c) > end) {
      end = c.file_offset() + StoredLength(c);
      who = owner;
    }
    return absl::OkStatus();
  });
  absl::StatusOr<std::string> resolved = storage::ResolveStepDir(backend_, root_, job, step);
  if (!resolved.ok()) return AsBroken(resolved.status());
  const std::string& dir = *resolved;
  for (const auto& [file, need] : needed) {
    absl::StatusOr<std::unique_ptr<storage::ReadableFile>> f =
        backend_.OpenReadOnlyBeneath(dir, file);
    if (files_elsewhere_ && absl::IsNotFound(f.status())) continue;
    if (!f.ok()) return AsBroken(f.status());
    absl::StatusOr<uint64_t> size = (*f)->Size();
    if (!size.ok()) return size.status();
    if (*size < need.first) {
      return absl::DataLossError(absl::StrCat(dir, "/", file, " is ", *size,
                                              " bytes, but a chunk of ", need.second,
                                              " ends at offset ", need.first));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Catalog::ReadStepFile(const std::string& job, int64_t step,
                                                  const std::string& name, uint64_t max_bytes) {
  absl::StatusOr<std::string> dir = storage::ResolveStepDir(backend_, root_, job, step);
  if (!dir.ok()) return dir.status();
  return storage::ReadWholeFileBeneath(backend_, *dir, name, max_bytes);
}

absl::Status Catalog::VerifiesShallow(const std::string& job, int64_t step) {
  absl::StatusOr<v1::CheckpointManifest> manifest = ReadStepManifest(job, step);
  if (!manifest.ok()) return manifest.status();
  return CheckDataFiles(job, step, *manifest);
}

absl::StatusOr<v1::CheckpointManifest> Catalog::ReadManifest(const std::string& job, int64_t step) {
  absl::StatusOr<int64_t> resolved = ResolveStep(job, step);
  if (!resolved.ok()) return resolved.status();
  absl::StatusOr<v1::CheckpointManifest> manifest = ReadStepManifest(job, *resolved);
  if (manifest.ok() || step != -1) return manifest;
  return BrokenLatest(job, *resolved, manifest.status());
}

absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> Catalog::ReadLoadManifest(
    const std::string& job, int64_t step) {
  absl::StatusOr<int64_t> resolved = ResolveStep(job, step);
  if (!resolved.ok()) return resolved.status();
  absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> columns =
      ReadStepColumns(job, *resolved);
  if (columns.ok() || step != -1) return columns;
  return BrokenLatest(job, *resolved, columns.status());
}

absl::Status Catalog::BrokenLatest(const std::string& job, int64_t resolved,
                                   const absl::Status& manifest) {
  // Fail closed on a broken latest, and say what the operator can do.
  std::string older = "; no older step verifies";
  absl::StatusOr<std::vector<int64_t>> steps = ListSteps(job);
  if (steps.ok()) {
    for (auto it = steps->rbegin(); it != steps->rend(); ++it) {
      if (*it >= resolved || !VerifiesShallow(job, *it).ok()) continue;
      older = absl::StrCat("; the newest older step that verifies is ", *it,
                           " (load it by its number)");
      break;
    }
  }
  return absl::Status(manifest.code(),
                      absl::StrCat("the latest checkpoint of job ", job, " is step ", resolved,
                                   ", which is broken: ", manifest.message(), older));
}

absl::StatusOr<std::vector<v1::CheckpointSummary>> Catalog::ListCheckpoints(
    const std::string& job) {
  absl::StatusOr<std::vector<int64_t>> steps = ListSteps(job);
  if (!steps.ok()) return steps.status();
  std::vector<v1::CheckpointSummary> out;
  if (steps->empty()) return out;
  absl::StatusOr<int64_t> latest = ResolveLatest(job);  // none when every step is broken
  for (int64_t step : *steps) {
    v1::CheckpointSummary& summary = out.emplace_back();
    summary.set_step(step);
    summary.set_latest(latest.ok() && *latest == step);
    absl::StatusOr<v1::CheckpointManifest> manifest = ReadStepManifest(job, step);
    absl::Status status = manifest.status();
    if (status.ok()) status = CheckDataFiles(job, step, *manifest);
    if (!status.ok()) {
      summary.set_broken(true);
      summary.set_broken_reason(std::string(status.message()));
      continue;
    }
    summary.set_created_unix_ms(manifest->created_unix_ms());
    uint64_t bytes = 0;
    (void)planning::ForEachChunk(*manifest, [&](const v1::StoredChunk& c, const std::string&) {
      bytes += c.length();
      return absl::OkStatus();
    });
    summary.set_bytes(bytes);
    summary.set_tensors(manifest->tensors_size());
    summary.set_objects(manifest->objects_size());
    if (manifest->has_delta_base_step()) summary.set_delta_base_step(manifest->delta_base_step());
  }
  return out;
}

}  // namespace ckpt::coordinator
