// ckptctl gc: deletes a job's old checkpoints through ckptd (which keeps
// the steps its loads are reading, and LATEST), or with --dry-run says what
// it would delete. Prints one line per step, kept or deleted, with the
// reason, then the total freed. Exit codes as in commands.h; a step that
// could not be deleted makes it 1.
#ifndef CKPT_TOOLS_CKPTCTL_GC_H_
#define CKPT_TOOLS_CKPTCTL_GC_H_

#include <cstdint>
#include <optional>
#include <string>

#include "tools/ckptctl/commands.h"

namespace ckpt::ctl {

struct GcOptions {
  std::string job;
  int64_t keep_last = 0;
  int64_t keep_every = 0;
  std::optional<int64_t> grace_s;  // nullopt: the daemon's --retain_grace_s
  bool dry_run = false;
  bool delete_broken = false;
};

int RunGc(const Call& call, const GcOptions& options);

}  // namespace ckpt::ctl

#endif  // CKPT_TOOLS_CKPTCTL_GC_H_
