// What is committed under a storage root: steps per job, their manifests
// (validated before anyone sees them: manifest_check.h), which step is
// latest, and start-up clean-up of partial directories left by a crash.
//
// "Latest" is what LATEST says (a rollback to a lower step is latest), or
// LATEST.next when it names a committed step (a commit that stopped between
// its rename and LATEST, see commit.h). When neither names a committed step
// (an old root, a LATEST lost or damaged), it is the highest step whose
// manifest validates, and a line on stderr says so.
//
// Thread-safety: safe from any thread. It keeps no state about the tree
// (the directory tree is the truth), only its own identity.
#ifndef CKPT_DAEMON_COORDINATOR_CATALOG_H_
#define CKPT_DAEMON_COORDINATOR_CATALOG_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/v1/manifest.pb.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/coordinator/manifest_read_slots.h"
#include "daemon/planning/column_manifest.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_footprint.h"
#include "daemon/planning/manifest_tables.h"
#include "daemon/storage/backend.h"

namespace ckpt::coordinator {

struct CatalogOptions {
  // This daemon's host, as it names its partial directories; characters
  // outside [A-Za-z0-9._-] become '_'. Empty: gethostname().
  std::string host;
  // This daemon process's instance: kInstanceIdLength lowercase hex digits.
  // Empty (or malformed): chosen at random when the Catalog is built, which
  // is once per daemon start.
  std::string instance;
  planning::ManifestLimits limits;
  // The steps' data files may be on other hosts (the memory tier of a job
  // spread over hosts: each host holds its own files and its replicas):
  // a data file missing here does not make a step broken; one present
  // must still be long enough.
  bool files_elsewhere = false;
  // Shared by the daemon's catalogs so that their manifest reads together
  // stay within kManifestReadSlots; null: this catalog's own.
  std::shared_ptr<ManifestReadSlots> read_slots = nullptr;
  // Commits write a manifest of this many tensor chunks or more split into
  // a root and per-file chunk tables (manifest_tables.h); 0: never. Reads
  // take both formats whatever it says.
  uint64_t split_manifest_min_chunks = 0;
};

class Catalog {
 public:
  Catalog(storage::Backend& backend, std::string root, CatalogOptions options = {});

  const std::string& root() const { return root_; }
  const std::string& host() const { return host_; }
  const std::string& instance() const { return instance_; }
  const planning::ManifestLimits& limits() const { return limits_; }
  uint64_t split_manifest_min_chunks() const { return split_manifest_min_chunks_; }

  // A file beside a committed step's MANIFEST (at most max_bytes), e.g. the
  // memory tier's stripes (Coordinator::kErasureFile); NOT_FOUND if none.
  absl::StatusOr<std::string> ReadStepFile(const std::string& job, int64_t step,
                                           const std::string& name, uint64_t max_bytes);

  // A fresh id for a partial directory of this daemon (layout.h PartialId).
  std::string NewPartialId();

  // Start-up clean-up: removes the partial directories this host's earlier
  // daemon instances left (never another host's, which may be saving right
  // now on a shared root, nor this instance's own), and repairs LATEST from
  // a LATEST.next a crash left (commit.h), and finishes the deletes of
  // steps this host's earlier instances had moved to trash (retention.h).
  // Returns how many partial directories it removed. Logs what it repaired
  // and the trash it removed.
  absl::StatusOr<int> RemoveStalePartials();
  // Committed step directories of a job, ascending; empty when the job has
  // none. Broken ones included.
  absl::StatusOr<std::vector<int64_t>> ListSteps(const std::string& job);
  // step >= 0 is checked to exist; -1 means latest (above).
  // NOT_FOUND naming the job and step otherwise.
  absl::StatusOr<int64_t> ResolveStep(const std::string& job, int64_t step);
  absl::StatusOr<bool> StepExists(const std::string& job, int64_t step);
  // The step's manifest, validated against the directory asked for. A
  // broken one is DATA_LOSS or FAILED_PRECONDITION naming the MANIFEST and
  // what is wrong; for step -1 the message also names the newest older step
  // that verifies (VerifiesShallow), if any.
  absl::StatusOr<v1::CheckpointManifest> ReadManifest(const std::string& job, int64_t step);
  // The same manifest in columns, as a load plans from it
  // (column_manifest_read.h): a split one is never joined into a message
  // per chunk. The same checks, errors and latest fallback as ReadManifest.
  absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> ReadLoadManifest(
      const std::string& job, int64_t step);
  // Every data file the manifest names can be opened (a regular file inside
  // the step directory) and is long enough for its chunks. DATA_LOSS naming
  // the file otherwise. Reads no data.
  absl::Status CheckDataFiles(const std::string& job, int64_t step,
                              const v1::CheckpointManifest& manifest);
  // Every step directory of the job, ascending; a broken one is listed with
  // broken = true and its reason. Fails only for a bad job name or an
  // unreadable job directory, never because of one step.
  absl::StatusOr<std::vector<v1::CheckpointSummary>> ListCheckpoints(const std::string& job);

 private:
  // ReadManifest of an existing step number, without the latest fallback.
  absl::StatusOr<v1::CheckpointManifest> ReadStepManifest(const std::string& job, int64_t step);
  // ReadLoadManifest's, the same way.
  absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> ReadStepColumns(
      const std::string& job, int64_t step);
  // Reads a step's MANIFEST and decodes it within the limits, then hands
  // it to `finish` with what it needs to read the chunk tables; within a
  // read slot throughout.
  template <typename Finish>
  auto ReadStep(const std::string& job, int64_t step, const Finish& finish)
      -> decltype(finish(v1::CheckpointManifest(), planning::ManifestFootprint(), uint64_t{0},
                         std::string(), planning::ChunkTablesReader()));
  // `manifest` (a read of latest, step `resolved`) failed: the error,
  // naming the newest older step that verifies.
  absl::Status BrokenLatest(const std::string& job, int64_t resolved, const absl::Status& manifest);
  // The MANIFEST's bytes; FAILED_PRECONDITION naming the flag when its size
  // is past --max_manifest_bytes or --max_manifest_memory_bytes.
  absl::StatusOr<std::string> ReadManifestFile(const std::string& dir, const std::string& path);
  // `length` bytes at `offset` of a split manifest's TABLES, which must be
  // `total` bytes (planning::ChunkTablesReader).
  absl::StatusOr<std::string> ReadTables(const std::string& dir, uint64_t offset, uint64_t length,
                                         uint64_t total);
  // The manifest validates and the data files are there (no CRCs read).
  absl::Status VerifiesShallow(const std::string& job, int64_t step);
  absl::StatusOr<int64_t> ResolveLatest(const std::string& job);

  storage::Backend& backend_;
  const std::string root_;
  const std::string host_;
  const std::string instance_;
  const planning::ManifestLimits limits_;
  const uint64_t split_manifest_min_chunks_;
  const bool files_elsewhere_;
  const std::shared_ptr<ManifestReadSlots> read_slots_;
  std::atomic<uint64_t> next_partial_{0};
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_CATALOG_H_
