#include "daemon/storage/chunk_reader.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/status_context.h"

namespace ckpt::storage {

ChunkReader::ChunkReader(storage::Backend& backend, std::string checkpoint_dir, uint64_t alignment)
    : backend_(backend),
      dir_(std::move(checkpoint_dir)),
      alignment_(std::max<uint64_t>(1, alignment)) {}

absl::StatusOr<ChunkReader::OpenFile*> ChunkReader::Open(const std::string& name,
                                                         absl::string_view owner) {
  auto it = files_.find(name);
  if (it != files_.end()) return &it->second;
  if (files_.size() >= kMaxOpenFiles) files_.clear();
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file =
      backend_.OpenReadOnlyBeneath(dir_, name);
  if (!file.ok()) return WithContext(file.status(), owner);
  absl::StatusOr<uint64_t> size = (*file)->Size();
  if (!size.ok()) return WithContext(size.status(), owner);
  OpenFile& open = files_[name];
  open.file = std::move(*file);
  open.size = *size;
  return &open;
}

absl::StatusOr<uint64_t> ChunkReader::ReadLength(const ChunkTarget& target,
                                                 uint64_t file_size) const {
  const v1::StoredChunk& chunk = *target.chunk;
  if (chunk.file_offset() > file_size || chunk.length() > file_size - chunk.file_offset()) {
    return absl::DataLossError(absl::StrCat(
        dir_, "/", chunk.file(), " at offset ", chunk.file_offset(), " (", target.owner,
        "): the file is ", file_size, " bytes, too short for a ", chunk.length(), "-byte chunk"));
  }
  // The writers pad the file to a block boundary after every chunk; a file
  // that was not (a foreign or cut one) is read exactly. (The manifest was
  // validated: the rounding cannot wrap.)
  const uint64_t aligned = (chunk.length() + alignment_ - 1) / alignment_ * alignment_;
  return aligned <= file_size - chunk.file_offset() ? aligned : chunk.length();
}

absl::Status ChunkReader::Verify(const ChunkTarget& target) const {
  const v1::StoredChunk& chunk = *target.chunk;
  if (Crc32c(target.dst, chunk.length()) == chunk.crc32c()) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat(
      "checksum mismatch in %s/%s at offset %d, %d bytes (%s): expected CRC32C %08x", dir_,
      chunk.file(), chunk.file_offset(), chunk.length(), target.owner, chunk.crc32c()));
}

absl::Status ChunkReader::ReadAll(absl::Span<const ChunkTarget> targets) {
  // One batch per file, in the targets' order within it.
  std::map<std::string, std::vector<storage::IoOp>> batches;
  std::map<std::string, absl::string_view> first_owner;
  for (const ChunkTarget& target : targets) {
    const v1::StoredChunk& chunk = *target.chunk;
    if (chunk.length() == 0) continue;
    absl::StatusOr<OpenFile*> open = Open(chunk.file(), target.owner);
    if (!open.ok()) return open.status();
    absl::StatusOr<uint64_t> length = ReadLength(target, (*open)->size);
    if (!length.ok()) return length.status();
    batches[chunk.file()].push_back({chunk.file_offset(), target.dst, *length});
    first_owner.emplace(chunk.file(), target.owner);
  }
  const absl::Time start = absl::Now();
  for (const auto& [name, ops] : batches) {
    absl::StatusOr<OpenFile*> open = Open(name, first_owner[name]);
    if (!open.ok()) return open.status();
    if (absl::Status s = (*open)->file->ReadBatch(ops); !s.ok()) {
      return WithContext(
          s, absl::StrCat("reading ", ops.size(), " chunks (", first_owner[name], ", ...)"));
    }
    for (const storage::IoOp& op : ops) bytes_read_ += op.length;
  }
  const absl::Time read = absl::Now();
  io_time_ += read - start;
  for (const ChunkTarget& target : targets) {
    if (target.chunk->length() == 0) continue;
    if (absl::Status s = Verify(target); !s.ok()) return s;
    chunk_bytes_read_ += target.chunk->length();
  }
  verify_time_ += absl::Now() - read;
  return absl::OkStatus();
}

}  // namespace ckpt::storage
