// Paths of the on-disk format (docs/design.md §6):
//   <root>/<job>/step-<N>/MANIFEST
//   <root>/<job>/step-<N>/data/<host>-<writer>.bin
//   <root>/<job>/step-<N>/TABLES           (a split manifest's chunk tables:
//                                          planning/manifest_tables.h)
//   <root>/<job>/.step-<N>.partial-<host>-<instance>-<seq>/
//                                          (in progress or abandoned; named by
//                                          the daemon that writes it)
//   <root>/<job>/.step-<N>.trash-<host>-<instance>-<seq>/
//                                          (a step gc is deleting: see
//                                          retention.h; never listed)
//   <root>/<job>/LATEST                    (latest committed step, decimal)
//   <root>/<job>/LATEST.next               (the step being committed: see commit.h)
#ifndef CKPT_DAEMON_STORAGE_LAYOUT_H_
#define CKPT_DAEMON_STORAGE_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace ckpt::storage {

inline std::string JobDir(absl::string_view root, absl::string_view job) {
  return absl::StrCat(root, "/", job);
}
inline std::string StepDirName(int64_t step) { return absl::StrCat("step-", step); }
inline std::string StepDir(absl::string_view root, absl::string_view job, int64_t step) {
  return absl::StrCat(JobDir(root, job), "/", StepDirName(step));
}
inline std::string PartialDir(absl::string_view root, absl::string_view job, int64_t step,
                              absl::string_view id) {
  return absl::StrCat(JobDir(root, job), "/.step-", step, ".partial-", id);
}
// Where gc renames step N before removing it: named like a partial
// directory (same id), so it is never listed and a restart knows whose it is.
inline std::string TrashDir(absl::string_view root, absl::string_view job, int64_t step,
                            absl::string_view id) {
  return absl::StrCat(JobDir(root, job), "/.step-", step, ".trash-", id);
}
inline constexpr char kManifestName[] = "MANIFEST";
inline constexpr char kLatestName[] = "LATEST";
inline constexpr char kLatestIntentName[] = "LATEST.next";
// Coordinator failover (coordinator/epoch_fence.h): the highest leader
// epoch that committed to the job ("<N>\n", as LATEST), and the file whose
// lock makes reading and advancing it one step (EPOCH itself is replaced
// whole, so it cannot carry the lock).
inline constexpr char kEpochName[] = "EPOCH";
inline constexpr char kFenceLockName[] = "EPOCH.lock";

// The id of a partial directory: which host and which daemon process (an
// instance id chosen at each start) writes it, and a sequence number within
// that process, so a retry never reuses an abandoned directory.
inline std::string PartialId(absl::string_view host, absl::string_view instance, uint64_t seq) {
  return absl::StrCat(host, "-", instance, "-", seq);
}
// Instance ids are this many lowercase hex digits.
inline constexpr size_t kInstanceIdLength = 16;

// LATEST and LATEST.next hold "<N>\n"; anything else (torn, empty, "007")
// is nullopt. Files larger than kMaxLatestBytes are not read at all.
inline constexpr uint64_t kMaxLatestBytes = 64;
std::optional<int64_t> ParseLatestContents(absl::string_view contents);

struct PartialDirName {
  int64_t step = 0;
  std::string host;
  std::string instance;
};
// ".step-<N>.partial-<host>-<instance>-<seq>" (host may contain '-'), or
// nullopt for anything else, including partial directories of older
// versions that did not name their owner.
std::optional<PartialDirName> ParsePartialDirName(absl::string_view name);
// The same for ".step-<N>.trash-<host>-<instance>-<seq>" (TrashDir).
std::optional<PartialDirName> ParseTrashDirName(absl::string_view name);

// The step of a "step-<N>" entry name, or nullopt for anything else.
std::optional<int64_t> ParseStepDirName(absl::string_view name);
// True for ".step-<N>.partial-<id>" entry names.
bool IsPartialDirName(absl::string_view name);

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_LAYOUT_H_
