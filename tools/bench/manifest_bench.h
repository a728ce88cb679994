// ckpt-plan-bench --manifest-dir: what a planned manifest costs to commit
// and to read in each format (docs/manifest.md), through the daemon's own
// code on a real directory: CommitCheckpoint (every file fsynced) and the
// catalog's read (decode, join, ValidateManifest).
#ifndef CKPT_TOOLS_BENCH_MANIFEST_BENCH_H_
#define CKPT_TOOLS_BENCH_MANIFEST_BENCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/manifest_check.h"

namespace ckpt::bench {

struct ManifestFigures {
  // Format 1: one MANIFEST.
  uint64_t whole_bytes = 0;
  double whole_commit_s = 0;
  double whole_read_s = 0;
  // Split: the root (a compact one, format 3, as commits write it) and
  // its chunk tables.
  uint32_t root_format = 0;
  uint64_t root_bytes = 0;
  uint64_t table_bytes = 0;  // all tables together
  int tables = 0;
  double split_commit_s = 0;
  double split_read_s = 0;
  // What one host needs of a split manifest: the root decoded and the
  // tables of its own data files (`host`'s).
  double host_read_s = 0;
};

// `planned` committed as step 1 (format 1; not with `split_only`) and
// step 2 (split) of its job under a fresh folder in `dir`, then read back;
// the folder is removed.
absl::StatusOr<ManifestFigures> MeasureManifestFormats(v1::CheckpointManifest planned,
                                                       const std::string& dir,
                                                       const std::string& host,
                                                       const planning::ManifestLimits& limits,
                                                       bool split_only = false);

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_MANIFEST_BENCH_H_
