// ckptctl export: a checkpoint as a Hugging Face safetensors model.
//
// Reads the checkpoint straight from the storage root (run it where the
// storage is mounted; no daemon needed) and writes
// model-0000i-of-0000N.safetensors files and model.safetensors.index.json.
// Every tensor is assembled whole from whatever sharding saved it, with the
// load planner, a bounded piece at a time (never a whole large tensor in
// memory), every chunk CRC-checked as it is read. Files are written under a
// temporary name, synced and renamed; the index comes last.
#ifndef CKPT_TOOLS_CKPTCTL_EXPORT_H_
#define CKPT_TOOLS_CKPTCTL_EXPORT_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/storage/s3/s3_root.h"

namespace ckpt::ctl {

struct ExportOptions {
  std::string storage_root = "/var/lib/ckpt";
  std::string job;
  int64_t step = -1;  // -1: latest
  std::string out_dir;
  std::string tensors_regex;  // empty: every tensor; else those whose name it finds
  // A JSON object {"regex": "replacement", ...}: each tensor's name is
  // rewritten by every rule whose regex it matches, rules in key order
  // (std::regex_replace, ECMAScript; "$1" refers to groups).
  std::string rename_file;
  uint64_t max_shard_bytes = 5'000'000'000;
  uint64_t piece_bytes = 64ull << 20;  // the bounded buffer per tensor piece
  // For an s3://bucket/prefix root: the server and the keys (as ckptd's
  // --s3_* flags).
  storage::s3::S3Settings s3;
};

// Writes the model; one line per file to `log`. Errors name the tensor,
// chunk or file.
absl::Status ExportSafetensors(const ExportOptions& options, std::ostream& log);

// "5GB" (1e9), "500MB", "2GiB", "4096": bytes. INVALID_ARGUMENT otherwise.
absl::StatusOr<uint64_t> ParseSize(const std::string& text);

}  // namespace ckpt::ctl

#endif  // CKPT_TOOLS_CKPTCTL_EXPORT_H_
