// The commit protocol (DESIGN.md §6). A checkpoint becomes visible in one
// atomic step, and a crash anywhere leaves either the old state or the new:
//
//  1. Data files are written into <job>/.step-N.partial-<id>/data/ and
//     fsynced by their writers before the node reports them. Without this a
//     crash after the rename could expose a manifest whose chunks are holes.
//  2. MANIFEST is written into the partial directory and fsynced, then the
//     partial directory itself is fsynced so its entries (data/, MANIFEST)
//     are durable before they become reachable under the final name.
//  3. The partial directory is renamed to step-N. rename(2) of a directory is
//     atomic: readers see no step-N or a complete one. Load never reads
//     partial directories, so an interrupted save is invisible.
//  4. The job directory is fsynced, making the rename durable; only now is
//     the checkpoint committed.
//  5. LATEST is replaced (tmp -> fsync -> rename -> fsync dir). It is a hint
//     for "load latest": if a crash loses this step, LATEST still names the
//     previous committed step, which is intact.
// On restart, leftover partial directories are removed (Catalog).
#ifndef CKPT_DAEMON_COORDINATOR_COMMIT_H_
#define CKPT_DAEMON_COORDINATOR_COMMIT_H_

#include <string>

#include "absl/status/status.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

// Steps 2-5 for a partial directory whose data files are already durable.
absl::Status CommitCheckpoint(storage::Backend& backend, const std::string& root,
                              const std::string& partial_dir,
                              const v1::CheckpointManifest& manifest);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_COMMIT_H_
