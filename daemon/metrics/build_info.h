// What ckpt_build_info reports. The revision is `git describe` of the tree
// CMake was configured from ("unknown" outside a git checkout).
#ifndef CKPT_DAEMON_METRICS_BUILD_INFO_H_
#define CKPT_DAEMON_METRICS_BUILD_INFO_H_

namespace ckpt::metrics {

inline constexpr char kVersion[] = "0.1.0";
#ifdef CKPT_GIT_REVISION
inline constexpr char kGitRevision[] = CKPT_GIT_REVISION;
#else
inline constexpr char kGitRevision[] = "unknown";
#endif

}  // namespace ckpt::metrics

#endif  // CKPT_DAEMON_METRICS_BUILD_INFO_H_
