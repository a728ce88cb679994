// The commit protocol (docs/design.md §6). A checkpoint becomes visible in one
// atomic step, and a crash anywhere leaves either the old state or the new:
//
//  1. Data files are written into <job>/.step-N.partial-<id>/data/ and
//     fsynced by their writers before the node reports them. Without this a
//     crash after the rename could expose a manifest whose chunks are holes.
//     The commit then fsyncs data/ itself, so the files' entries are durable
//     too (an fsynced file whose name is lost is no better than a hole).
//  2. MANIFEST is written into the partial directory and fsynced, then the
//     partial directory itself is fsynced so its entries (data/, MANIFEST)
//     are durable before they become reachable under the final name.
//  3. LATEST.next is written with N, fsynced, and the job directory fsynced:
//     the intent to make N latest is durable before N can be visible.
//  4. The partial directory is renamed to step-N. rename(2) of a directory is
//     atomic: readers see no step-N or a complete one. Load never reads
//     partial directories, so an interrupted save is invisible.
//  5. The job directory is fsynced, making the rename durable; only now is
//     the checkpoint committed, and from here on the save reports success.
//  6. LATEST is replaced (tmp -> fsync -> rename -> fsync dir) and
//     LATEST.next removed. LATEST is the truth for "latest" (a rollback to a
//     lower step is latest), so a crash or an error between 5 and 6 must not
//     leave the previous step as latest: LATEST.next naming a committed step
//     overrides LATEST, and RepairLatest folds it in (at start-up, and before
//     the next commit). A LATEST.next naming no committed step is a commit
//     that died before its rename and means nothing.
// On an object store (Backend::IsObjectStore, docs/design.md §6b) there is
// no rename and no fsync: every object is durable once written. Steps 1-3
// are the same writes; steps 4-5 are one create of <job>/step-N/COMMIT
// naming the partial directory and the manifest's size and CRC32C
// (storage/step_location.h), refused if it exists. The data stays where
// it was written; readers find it through the commit object.
// Commits of one job must not run concurrently (the Coordinator serializes
// them). On restart, leftover partial directories of this host's earlier
// daemon instances are removed (Catalog).
#ifndef CKPT_DAEMON_COORDINATOR_COMMIT_H_
#define CKPT_DAEMON_COORDINATOR_COMMIT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_tables.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

// How a commit writes its manifest.
struct ManifestWriting {
  // A manifest of this many tensor chunks or more (0: never) is written
  // split (planning/manifest_tables.h): its chunk tables (TABLES), synced,
  // before the root MANIFEST.
  uint64_t split_min_chunks = 0;
  // What its readers accept: a split they would refuse is written in
  // format 1 instead.
  planning::ManifestLimits limits;
};

// Steps 1 (the data/ fsync) to 6 for a partial directory whose data files
// are already durable. An error means the step is not committed (and not
// visible); once step 5 is done it returns OK, and a failure to write LATEST
// (retried) is logged on stderr and left to RepairLatest. Errors read
// "commit: <what failed>": the caller names the save.
// make_latest = false commits the step without touching LATEST (steps 3
// and 6): a step copied in late (the memory tier's persistence) that is
// older than the latest must not become latest.
// `commit_point`, when given, is asked just before the rename (step 4): an
// error there (a host of the save was lost meanwhile) is returned and the
// step is not committed.
// `writing` says in which format the manifest is written.
absl::Status CommitCheckpoint(storage::Backend& backend, const std::string& root,
                              const std::string& partial_dir,
                              const v1::CheckpointManifest& manifest, bool make_latest = true,
                              const std::function<absl::Status()>& commit_point = nullptr,
                              const ManifestWriting& writing = {});

// A manifest as a commit writes it: MANIFEST's bytes and, for a split
// manifest (planning/manifest_tables.h), TABLES'.
struct ManifestFiles {
  std::string job;
  int64_t step = 0;
  std::string manifest;
  std::optional<std::string> tables;
};

// A split manifest as a commit writes it: the tables back to back in one
// file, one fsync however many hosts.
ManifestFiles FilesOfSplit(std::string job, int64_t step, planning::SplitManifestFiles split);

// `manifest` as a commit writes it under `writing`: split, or format 1.
ManifestFiles EncodeForCommit(const v1::CheckpointManifest& manifest,
                              const ManifestWriting& writing);

// CommitCheckpoint of a manifest already encoded (a save's, split as it
// was made from its plan: committer.h).
absl::Status CommitCheckpoint(storage::Backend& backend, const std::string& root,
                              const std::string& partial_dir, const ManifestFiles& files,
                              bool make_latest, const std::function<absl::Status()>& commit_point);

// True for a commit error after which the step may be committed or not (an
// object store's answer to the commit object was lost and it could not be
// read back): the caller fails the save but keeps its files, which a
// committed step needs; a restart sorts them out (Catalog).
bool CommitOutcomeUnknown(const absl::Status& status);

// The step LATEST.next names when that step is committed (its directory
// exists), nullopt otherwise; never fails on a missing or torn LATEST.next.
absl::StatusOr<std::optional<int64_t>> CommittedIntent(storage::Backend& backend,
                                                       const std::string& root,
                                                       const std::string& job);

// Folds a LATEST.next that names a committed step into LATEST, then removes
// LATEST.next (also when it names nothing committed). Returns the step now
// written to LATEST, or nullopt when nothing needed repair.
absl::StatusOr<std::optional<int64_t>> RepairLatest(storage::Backend& backend,
                                                    const std::string& root,
                                                    const std::string& job);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_COMMIT_H_
