// ckptctl import: a safetensors model directory as a checkpoint step, so a
// pretrained model can be the starting point of training and load into any
// sharding.
//
// Reads every *.safetensors file of the directory (memory-mapped: the
// tensors go to the daemon from the mapping, as a rank's would) and saves
// them through ckptd as rank 0 of a one-rank job, so the checkpoint is
// written, checksummed and committed exactly as a trainer's would be.
// The files are untrusted input: every header length, offset, shape and
// dtype is checked against the file before anything is read.
#ifndef CKPT_TOOLS_CKPTCTL_IMPORT_SAFETENSORS_H_
#define CKPT_TOOLS_CKPTCTL_IMPORT_SAFETENSORS_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckpt::ctl {

struct ImportOptions {
  std::string in_dir;
  std::string socket_path;
  std::string job;
  int64_t step = 0;
};

absl::Status ImportSafetensors(const ImportOptions& options, std::ostream& log);

}  // namespace ckpt::ctl

#endif  // CKPT_TOOLS_CKPTCTL_IMPORT_SAFETENSORS_H_
