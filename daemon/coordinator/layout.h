// Paths of the on-disk format (DESIGN.md §6):
//   <root>/<job>/step-<N>/MANIFEST
//   <root>/<job>/step-<N>/data/<host>-<writer>.bin
//   <root>/<job>/.step-<N>.partial-<id>/   (in progress or abandoned)
//   <root>/<job>/LATEST                    (newest committed step, decimal)
#ifndef CKPT_DAEMON_COORDINATOR_LAYOUT_H_
#define CKPT_DAEMON_COORDINATOR_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace ckpt::coordinator {

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
inline constexpr char kManifestName[] = "MANIFEST";
inline constexpr char kLatestName[] = "LATEST";

// The step of a "step-<N>" entry name, or nullopt for anything else.
std::optional<int64_t> ParseStepDirName(absl::string_view name);
// True for ".step-<N>.partial-<id>" entry names.
bool IsPartialDirName(absl::string_view name);

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_LAYOUT_H_
