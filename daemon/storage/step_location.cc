#include "daemon/storage/step_location.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "daemon/storage/layout.h"
#include "proto/lib/crc32c.h"

namespace ckpt::storage {

std::string EncodeCommitRecord(const CommitRecord& record) {
  return absl::StrFormat("ckpt-commit 1\ndir %s\nmanifest_bytes %d\nmanifest_crc32c %08x\n",
                         record.dir, record.manifest_bytes, record.manifest_crc32c);
}

std::optional<CommitRecord> ParseCommitRecord(absl::string_view contents, int64_t step) {
  if (contents.size() > kMaxCommitBytes) return std::nullopt;
  const std::vector<absl::string_view> lines = absl::StrSplit(contents, '\n');
  // Four lines and the empty string after the last newline.
  if (lines.size() != 5 || lines[0] != "ckpt-commit 1" || !lines[4].empty()) return std::nullopt;
  auto value = [&](absl::string_view line, absl::string_view key) -> std::optional<std::string> {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, " ")) return std::nullopt;
    return std::string(line);
  };
  CommitRecord record;
  std::optional<std::string> dir = value(lines[1], "dir");
  std::optional<std::string> bytes = value(lines[2], "manifest_bytes");
  std::optional<std::string> crc = value(lines[3], "manifest_crc32c");
  if (!dir || !bytes || !crc) return std::nullopt;
  const std::optional<PartialDirName> partial = ParsePartialDirName(*dir);
  if (!partial.has_value() || partial->step != step) return std::nullopt;
  record.dir = *dir;
  if (!absl::SimpleAtoi(*bytes, &record.manifest_bytes)) return std::nullopt;
  if (crc->size() != 8 || !absl::SimpleHexAtoi(*crc, &record.manifest_crc32c)) return std::nullopt;
  if (EncodeCommitRecord(record) != contents) return std::nullopt;  // one spelling only
  return record;
}

std::string CommitPath(absl::string_view root, absl::string_view job, int64_t step) {
  return absl::StrCat(StepDir(root, job, step), "/", kCommitName);
}

absl::StatusOr<std::string> ResolveStepDir(Backend& backend, absl::string_view root,
                                           absl::string_view job, int64_t step) {
  absl::StatusOr<ResolvedStep> resolved = ResolveStep(backend, root, job, step);
  if (!resolved.ok()) return resolved.status();
  return std::move(resolved->dir);
}

absl::Status CheckCommittedManifest(const ResolvedStep& step, absl::string_view manifest_bytes,
                                    absl::string_view manifest_path) {
  if (!step.commit.has_value()) return absl::OkStatus();
  const uint32_t crc = Crc32c(manifest_bytes.data(), manifest_bytes.size());
  if (manifest_bytes.size() == step.commit->manifest_bytes && crc == step.commit->manifest_crc32c) {
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrFormat(
      "%s is %d bytes with CRC32C %08x, but the step's COMMIT recorded %d bytes with %08x",
      manifest_path, manifest_bytes.size(), crc, step.commit->manifest_bytes,
      step.commit->manifest_crc32c));
}

absl::StatusOr<ResolvedStep> ResolveStep(Backend& backend, absl::string_view root,
                                         absl::string_view job, int64_t step) {
  if (!backend.IsObjectStore()) return ResolvedStep{StepDir(root, job, step), std::nullopt};
  const std::string path = CommitPath(root, job, step);
  absl::StatusOr<std::string> contents = ReadWholeFile(backend, path, kMaxCommitBytes);
  if (!contents.ok()) return contents.status();
  const std::optional<CommitRecord> record = ParseCommitRecord(*contents, step);
  if (!record.has_value()) {
    return absl::DataLossError(absl::StrCat(path, " is not a commit record of step ", step));
  }
  return ResolvedStep{absl::StrCat(JobDir(root, job), "/", record->dir), record};
}

absl::StatusOr<bool> StepCommitted(Backend& backend, absl::string_view root, absl::string_view job,
                                   int64_t step) {
  return backend.Exists(backend.IsObjectStore() ? CommitPath(root, job, step)
                                                : StepDir(root, job, step));
}

std::string StepPinPath(const Backend& backend, absl::string_view root, absl::string_view job,
                        int64_t step) {
  return backend.IsObjectStore() ? CommitPath(root, job, step)
                                 : absl::StrCat(StepDir(root, job, step), "/", kManifestName);
}

}  // namespace ckpt::storage
