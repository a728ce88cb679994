#include "tools/bench/manifest_bench.h"

#include <unistd.h>

#include <chrono>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/commit.h"
#include "daemon/coordinator/partial_dir.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "daemon/storage/backend.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "proto/lib/status_context.h"

namespace ckpt::bench {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

uint64_t FileBytes(storage::Backend& backend, const std::string& path) {
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> f = backend.NewReadableFile(path);
  if (!f.ok()) return 0;
  absl::StatusOr<uint64_t> size = (*f)->Size();
  return size.ok() ? *size : 0;
}

struct Commit {
  double commit_s = 0;
  double read_s = 0;
};

absl::StatusOr<Commit> CommitAndRead(storage::Backend& backend, const std::string& root,
                                     v1::CheckpointManifest& manifest, int64_t step,
                                     uint64_t split_min_chunks,
                                     const planning::ManifestLimits& limits) {
  manifest.set_step(step);
  const std::string partial =
      storage::PartialDir(root, manifest.job(), step, absl::StrCat("bench-", step));
  if (absl::Status s = coordinator::CreatePartialDir(backend, root, manifest.job(), partial);
      !s.ok()) {
    return s;
  }
  Commit c;
  auto start = std::chrono::steady_clock::now();
  if (absl::Status s = coordinator::CommitCheckpoint(backend, root, partial, manifest, true,
                                                     nullptr, {split_min_chunks, limits});
      !s.ok()) {
    return WithContext(s, "commit");
  }
  c.commit_s = Since(start);
  coordinator::CatalogOptions options;
  options.limits = limits;
  coordinator::Catalog catalog(backend, root, options);
  start = std::chrono::steady_clock::now();
  absl::StatusOr<v1::CheckpointManifest> read = catalog.ReadManifest(manifest.job(), step);
  if (!read.ok()) return WithContext(read.status(), "read");
  c.read_s = Since(start);
  return c;
}

}  // namespace

absl::StatusOr<ManifestFigures> MeasureManifestFormats(v1::CheckpointManifest planned,
                                                       const std::string& dir,
                                                       const std::string& host,
                                                       const planning::ManifestLimits& limits,
                                                       bool split_only) {
  std::unique_ptr<storage::Backend> backend = storage::NewPosixBackend();
  const std::string root = absl::StrCat(dir, "/ckpt-manifest-bench-", getpid());
  if (absl::Status s = backend->CreateDirs(root); !s.ok()) return s;
  ManifestFigures f;
  absl::Status status = [&]() -> absl::Status {
    if (!split_only) {
      absl::StatusOr<Commit> whole = CommitAndRead(*backend, root, planned, 1, 0, limits);
      if (!whole.ok()) return WithContext(whole.status(), "format 1");
      f.whole_commit_s = whole->commit_s;
      f.whole_read_s = whole->read_s;
      const std::string step1 = storage::StepDir(root, planned.job(), 1);
      f.whole_bytes = FileBytes(*backend, absl::StrCat(step1, "/", storage::kManifestName));
    }

    absl::StatusOr<Commit> split = CommitAndRead(*backend, root, planned, 2, 1, limits);
    if (!split.ok()) return WithContext(split.status(), "split");
    f.split_commit_s = split->commit_s;
    f.split_read_s = split->read_s;
    const std::string step2 = storage::StepDir(root, planned.job(), 2);
    const std::string root_path = absl::StrCat(step2, "/", storage::kManifestName);
    f.root_bytes = FileBytes(*backend, root_path);

    // One host's read: the root, then only its own files' tables.
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> bytes =
        storage::ReadWholeFile(*backend, root_path, limits.max_manifest_bytes);
    if (!bytes.ok()) return bytes.status();
    absl::StatusOr<v1::CheckpointManifest> m =
        planning::DecodeBoundedManifest(*bytes, root_path, limits);
    if (!m.ok()) return m.status();
    f.root_format = m->format_version();
    const std::string prefix = absl::StrCat("data/", host, "-");
    absl::StatusOr<std::unique_ptr<storage::ReadableFile>> tables =
        backend->NewReadableFile(absl::StrCat(step2, "/", planning::kChunkTablesFile));
    if (!tables.ok()) return tables.status();
    for (int i = 0; i < m->chunk_tables_size(); ++i) {
      const v1::ChunkTableRef& ref = m->chunk_tables(i);
      const uint64_t offset = f.table_bytes;  // the tables lie back to back
      f.table_bytes += ref.bytes();
      ++f.tables;
      if (!absl::StartsWith(ref.file(), prefix)) continue;
      std::string table(ref.bytes(), '\0');
      storage::IoOp op{offset, table.data(), table.size()};
      if (absl::Status s = (*tables)->ReadBatch({&op, 1}); !s.ok()) return s;
      const std::string name = planning::ChunkTableName(static_cast<uint32_t>(i + 1));
      if (absl::Status s = planning::DecodeChunkTable(table, name, limits).status(); !s.ok()) {
        return s;
      }
    }
    f.host_read_s = Since(start);
    return absl::OkStatus();
  }();
  (void)backend->RemoveAll(root);
  if (!status.ok()) return status;
  return f;
}

}  // namespace ckpt::bench
