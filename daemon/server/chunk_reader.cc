#include "daemon/server/chunk_reader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/lib/crc32c.h"

namespace ckpt::server {

ChunkReader::ChunkReader(storage::Backend& backend, std::string checkpoint_dir,
                         uint64_t alignment)
    : backend_(backend), dir_(std::move(checkpoint_dir)), alignment_(std::max<uint64_t>(1, alignment)) {}

absl::StatusOr<ChunkReader::OpenFile*> ChunkReader::Open(const std::string& name,
                                                         absl::string_view owner) {
  auto it = files_.find(name);
  if (it != files_.end()) return &it->second;
  if (files_.size() >= kMaxOpenFiles) files_.clear();
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file =
      backend_.OpenReadOnlyBeneath(dir_, name);
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat(owner, ": ", file.status().message()));
  }
  absl::StatusOr<uint64_t> size = (*file)->Size();
  if (!size.ok()) {
    return absl::Status(size.status().code(), absl::StrCat(owner, ": ", size.status().message()));
  }
  OpenFile& open = files_[name];
  open.file = std::move(*file);
  open.size = *size;
  return &open;
}

absl::Status ChunkReader::Read(const v1::StoredChunk& chunk, absl::string_view owner, char* dst) {
  if (chunk.length() == 0) return absl::OkStatus();
  absl::StatusOr<OpenFile*> open = Open(chunk.file(), owner);
  if (!open.ok()) return open.status();
  const std::string path = absl::StrCat(dir_, "/", chunk.file());
  const uint64_t size = (*open)->size;
  if (chunk.file_offset() > size || chunk.length() > size - chunk.file_offset()) {
    return absl::DataLossError(absl::StrCat(path, " at offset ", chunk.file_offset(), " (", owner,
                                            "): the file is ", size, " bytes, too short for a ",
                                            chunk.length(), "-byte chunk"));
  }
  // Whole aligned blocks, so the read can bypass the page cache; the file
  // is padded to a block boundary after every chunk. (The manifest was
  // validated: the rounding cannot wrap.)
  const uint64_t length = (chunk.length() + alignment_ - 1) / alignment_ * alignment_;
  absl::StatusOr<size_t> got = (*open)->file->ReadAt(chunk.file_offset(), dst, length);
  if (!got.ok()) {
    return absl::Status(got.status().code(), absl::StrCat(owner, ": ", got.status().message()));
  }
  bytes_read_ += *got;
  if (*got < chunk.length()) {
    return absl::DataLossError(absl::StrCat(path, " at offset ", chunk.file_offset(), " (", owner,
                                            "): truncated: read ", *got, " of ", chunk.length(),
                                            " bytes"));
  }
  if (Crc32c(dst, chunk.length()) != chunk.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch in %s at offset %d, %d bytes (%s): expected CRC32C %08x", path,
        chunk.file_offset(), chunk.length(), owner, chunk.crc32c()));
  }
  return absl::OkStatus();
}

}  // namespace ckpt::server
