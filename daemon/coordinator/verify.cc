#include "daemon/coordinator/verify.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/step_location.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/status_context.h"
#include "proto/lib/stored_chunk.h"

namespace ckpt::coordinator {
namespace {

// Pieces are block multiples, so whole pieces can bypass the page cache.
constexpr size_t kBlock = 4096;
constexpr size_t kMaxOpenFiles = 64;

struct OpenFile {
  std::unique_ptr<storage::ReadableFile> file;
  uint64_t size = 0;
};

}  // namespace

absl::StatusOr<VerifyResult> VerifyCheckpoint(storage::Backend& backend, Catalog& catalog,
                                              const std::string& job, int64_t step,
                                              size_t piece_bytes) {
  absl::StatusOr<v1::CheckpointManifest> manifest = catalog.ReadManifest(job, step);
  if (!manifest.ok()) return manifest.status();
  // Validated: manifest->step() is the step of the directory it was read from.
  VerifyResult result;
  result.step = manifest->step();
  absl::StatusOr<std::string> resolved =
      storage::ResolveStepDir(backend, catalog.root(), job, result.step);
  if (!resolved.ok()) return resolved.status();
  const std::string& dir = *resolved;
  // A step of deltas loads only with its base: that it is there and sound
  // (`ckptctl verify` of the base checks its bytes).
  if (manifest->has_delta_base_step()) {
    absl::StatusOr<v1::CheckpointManifest> base =
        catalog.ReadManifest(job, manifest->delta_base_step());
    if (!base.ok()) {
      return absl::DataLossError(absl::StrCat(
          "step ", result.step, " is stored as deltas against step ", manifest->delta_base_step(),
          ", which cannot be read: ", base.status().message()));
    }
  }

  piece_bytes = std::max(kBlock, piece_bytes / kBlock * kBlock);
  std::unique_ptr<char, decltype(&std::free)> buffer(
      static_cast<char*>(std::aligned_alloc(kBlock, piece_bytes)), &std::free);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("verify of job ", job, " step ", result.step,
                                                     ": cannot allocate ", piece_bytes, " bytes"));
  }
  std::map<std::string, OpenFile> files;

  const absl::Status checked = planning::ForEachChunk(
      *manifest, [&](const v1::StoredChunk& chunk, const std::string& owner) -> absl::Status {
        result.chunks += 1;
        if (chunk.length() == 0) return absl::OkStatus();
        const std::string path = absl::StrCat(dir, "/", chunk.file());
        auto it = files.find(chunk.file());
        if (it == files.end()) {
          if (files.size() >= kMaxOpenFiles) files.clear();
          absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file =
              backend.OpenReadOnlyBeneath(dir, chunk.file());
          if (!file.ok()) {
            return WithContext(file.status(), owner);
          }
          absl::StatusOr<uint64_t> size = (*file)->Size();
          if (!size.ok()) return size.status();
          it = files.emplace(chunk.file(), OpenFile{std::move(*file), *size}).first;
        }
        const uint64_t size = it->second.size;
        // As stored: an encoded chunk is checked without decoding it.
        const uint64_t stored = StoredLength(chunk);
        const uint32_t expected = StoredCrc32c(chunk);
        if (chunk.file_offset() > size || stored > size - chunk.file_offset()) {
          return absl::DataLossError(
              absl::StrCat(path, " at offset ", chunk.file_offset(), " (", owner, "): the file is ",
                           size, " bytes, too short for a ", stored, "-byte chunk"));
        }
        uint32_t crc = 0;
        for (uint64_t done = 0; done < stored;) {
          const size_t piece = static_cast<size_t>(std::min<uint64_t>(piece_bytes, stored - done));
          storage::IoOp op{chunk.file_offset() + done, buffer.get(), piece};
          if (absl::Status s = it->second.file->ReadBatch({&op, 1}); !s.ok()) {
            return WithContext(s, owner);  // names the file and offset
          }
          crc = Crc32cExtend(crc, buffer.get(), piece);
          done += piece;
        }
        if (crc != expected) {
          return absl::DataLossError(absl::StrFormat(
              "checksum mismatch in %s at offset %d, %d bytes (%s): expected CRC32C %08x", path,
              chunk.file_offset(), stored, owner, expected));
        }
        result.bytes += chunk.length();
        return absl::OkStatus();
      });
  if (!checked.ok()) return checked;
  return result;
}

}  // namespace ckpt::coordinator
