#include "daemon/server/chunk_reader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/coordinator/save_planner.h"
#include "proto/lib/crc32c.h"

namespace ckpt::server {

ChunkReader::ChunkReader(storage::Backend& backend, std::string checkpoint_dir,
                         uint64_t alignment)
    : backend_(backend), dir_(std::move(checkpoint_dir)), alignment_(alignment) {}

absl::Status ChunkReader::Read(const v1::StoredChunk& chunk, absl::string_view owner, char* dst) {
  if (chunk.length() == 0) return absl::OkStatus();
  const std::string path = absl::StrCat(dir_, "/", chunk.file());
  auto it = files_.find(path);
  if (it == files_.end()) {
    absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file = backend_.NewReadableFile(path);
    if (!file.ok()) {
      return absl::Status(file.status().code(),
                          absl::StrCat(owner, ": ", file.status().message()));
    }
    it = files_.emplace(path, std::move(*file)).first;
  }
  // Whole aligned blocks, so the read can bypass the page cache; the file
  // is padded to a block boundary after every chunk.
  const uint64_t length = coordinator::AlignUp(chunk.length(), alignment_);
  absl::StatusOr<size_t> got = it->second->ReadAt(chunk.file_offset(), dst, length);
  if (!got.ok()) {
    return absl::Status(got.status().code(), absl::StrCat(owner, ": ", got.status().message()));
  }
  bytes_read_ += *got;
  if (*got < chunk.length()) {
    return absl::DataLossError(absl::StrCat(path, " at offset ", chunk.file_offset(), " (", owner,
                                            "): truncated: read ", *got, " of ", chunk.length(),
                                            " bytes"));
  }
  const uint32_t crc = Crc32c(dst, chunk.length());
  if (crc != chunk.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch in %s at offset %d, %d bytes (%s): stored %08x, computed %08x", path,
        chunk.file_offset(), chunk.length(), owner, chunk.crc32c(), crc));
  }
  return absl::OkStatus();
}

}  // namespace ckpt::server
