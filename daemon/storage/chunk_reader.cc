#include "daemon/storage/chunk_reader.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/codec/chunk_codec.h"
#include "daemon/codec/step_delta.h"
#include "daemon/storage/layout.h"
#include "proto/lib/align.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/status_context.h"
#include "proto/lib/stored_chunk.h"

namespace ckpt::storage {

ChunkReader::ChunkReader(storage::Backend& backend, std::string checkpoint_dir, uint64_t alignment)
    : backend_(backend),
      dir_(std::move(checkpoint_dir)),
      alignment_(std::max<uint64_t>(1, alignment)),
      scratch_(alignment_),
      base_scratch_(alignment_) {}

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
  const uint64_t stored = StoredLength(chunk);
  if (chunk.file_offset() > file_size || stored > file_size - chunk.file_offset()) {
    return absl::DataLossError(
        absl::StrCat(dir_, "/", chunk.file(), " at offset ", chunk.file_offset(), " (",
                     target.owner, "): the file is ", file_size, " bytes, too short for a ", stored,
                     "-byte ", IsEncoded(chunk) ? "encoded " : "", "chunk"));
  }
  // The writers pad the file to a block boundary after every chunk; a file
  // that was not (a foreign or cut one) is read exactly. (The manifest was
  // validated: the rounding cannot wrap.)
  const uint64_t aligned = AlignUp(stored, alignment_);
  return aligned <= file_size - chunk.file_offset() ? aligned : stored;
}

absl::Status ChunkReader::Verify(const ChunkTarget& target) const {
  const v1::StoredChunk& chunk = *target.chunk;
  if (Crc32c(target.dst, chunk.length()) == chunk.crc32c()) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat(
      "checksum mismatch in %s/%s at offset %d, %d bytes (%s): expected CRC32C %08x", dir_,
      chunk.file(), chunk.file_offset(), chunk.length(), target.owner, chunk.crc32c()));
}

absl::Status ChunkReader::Decode(const ChunkTarget& target, const char* stored) const {
  const v1::StoredChunk& chunk = *target.chunk;
  const absl::string_view codec = codec::CodecName(static_cast<codec::Codec>(chunk.codec()));
  // The stored bytes first: a flipped bit is named as such, and never fed
  // to the decoder.
  if (Crc32c(stored, chunk.stored_length()) != chunk.stored_crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "checksum mismatch in %s/%s at offset %d, %d %s-encoded bytes (%s): expected CRC32C %08x",
        dir_, chunk.file(), chunk.file_offset(), chunk.stored_length(), codec, target.owner,
        chunk.stored_crc32c()));
  }
  const absl::Status decoded = codec::DecodeChunk(
      static_cast<codec::Codec>(chunk.codec()), static_cast<int>(chunk.element_bytes()),
      {stored, chunk.stored_length()}, {target.dst, chunk.length()});
  if (decoded.ok()) return decoded;
  return absl::DataLossError(absl::StrCat(
      dir_, "/", chunk.file(), " at offset ", chunk.file_offset(), " (", target.owner, "): its ",
      codec, " bytes do not decode to its ", chunk.length(), " bytes: ", decoded.message()));
}

absl::Status ChunkReader::ApplyDelta(const ChunkTarget& target) {
  const v1::StoredChunk& chunk = *target.chunk;
  const int64_t step = chunk.delta_base_step();
  const auto lost = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(dir_, "/", chunk.file(), " at offset ",
                                            chunk.file_offset(), " (", target.owner,
                                            ") is a delta against step ", step, ", ", why));
  };
  // Validated manifests hold nothing else; a plan is checked again here,
  // since the base is read into room sized by this chunk.
  if (chunk.delta_base().length() != chunk.length() || chunk.delta_base().has_delta_base() ||
      step < 0) {
    return lost("whose chunk is not one a delta can be against");
  }
  std::unique_ptr<ChunkReader>& base = base_readers_[step];
  if (base == nullptr) {
    // The base step is a sibling of this one: <job dir>/step-<B>.
    const size_t slash = dir_.rfind('/');
    const std::string job_dir = slash == std::string::npos ? "" : dir_.substr(0, slash + 1);
    base = std::make_unique<ChunkReader>(backend_, job_dir + StepDirName(step), alignment_);
  }
  const uint64_t room = AlignUp(chunk.length(), alignment_);
  char* into = base_scratch_.Get(room);
  if (into == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        dir_, "/", chunk.file(), " at offset ", chunk.file_offset(), " (", target.owner,
        "): no memory for its ", room, "-byte delta base of step ", step));
  }
  const uint64_t before = base->bytes_read();
  const absl::Status read = base->Read(chunk.delta_base(), target.owner, into);
  bytes_read_ += base->bytes_read() - before;
  if (!read.ok()) {
    // Missing or damaged, the base makes this step unreadable: data lost.
    return lost(absl::StrCat("whose chunk cannot be read: ", read.message()));
  }
  codec::XorInto({into, chunk.length()}, {target.dst, chunk.length()});
  return absl::OkStatus();
}

absl::Status ChunkReader::ReadAll(absl::Span<const ChunkTarget> targets) {
  // One batch per file, in the targets' order within it. Encoded chunks
  // are read into the scratch, each at an aligned place, then decoded
  // into their targets.
  std::map<std::string, std::vector<storage::IoOp>> batches;
  std::map<std::string, absl::string_view> first_owner;
  std::vector<uint64_t> scratch_at(targets.size(), 0);
  uint64_t scratch_bytes = 0;
  std::vector<uint64_t> lengths(targets.size(), 0);
  for (size_t i = 0; i < targets.size(); ++i) {
    const ChunkTarget& target = targets[i];
    const v1::StoredChunk& chunk = *target.chunk;
    if (chunk.length() == 0) continue;
    absl::StatusOr<OpenFile*> open = Open(chunk.file(), target.owner);
    if (!open.ok()) return open.status();
    absl::StatusOr<uint64_t> length = ReadLength(target, (*open)->size);
    if (!length.ok()) return length.status();
    lengths[i] = *length;
    if (IsEncoded(chunk)) {
      // Bounded: each is checked against its file's size above.
      scratch_at[i] = scratch_bytes;
      scratch_bytes += AlignUp(*length, alignment_);
    }
  }
  char* scratch = scratch_bytes > 0 ? scratch_.Get(scratch_bytes) : nullptr;
  if (scratch_bytes > 0 && scratch == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no memory for ", scratch_bytes, " bytes of encoded chunks in ", dir_));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const ChunkTarget& target = targets[i];
    const v1::StoredChunk& chunk = *target.chunk;
    if (chunk.length() == 0) continue;
    char* into = IsEncoded(chunk) ? scratch + scratch_at[i] : target.dst;
    batches[chunk.file()].push_back({chunk.file_offset(), into, lengths[i]});
    first_owner.emplace(chunk.file(), target.owner);
  }
  const absl::Time start = absl::Now();
  // All files' reads at once (Backend::ReadFiles), as many files as stay
  // open together: none is closed while its reads run.
  auto next = batches.begin();
  while (next != batches.end()) {
    size_t to_open = 0;  // of the next round's files, those not open yet
    size_t round = 0;
    for (auto it = next; it != batches.end() && round < kMaxOpenFiles; ++it, ++round) {
      to_open += files_.count(it->first) == 0 ? 1 : 0;
    }
    if (files_.size() + to_open > kMaxOpenFiles) files_.clear();
    std::vector<const std::string*> names;
    std::vector<FileReads> files;
    for (; next != batches.end() && files.size() < kMaxOpenFiles; ++next) {
      const auto& [name, ops] = *next;
      absl::StatusOr<OpenFile*> open = Open(name, first_owner[name]);
      if (!open.ok()) return open.status();
      names.push_back(&name);
      files.push_back({(*open)->file.get(), ops});
    }
    size_t failed = 0;
    if (absl::Status s = backend_.ReadFiles(files, &failed); !s.ok()) {
      const std::string& name = *names[failed];
      return WithContext(s, absl::StrCat("reading ", batches[name].size(), " chunks (",
                                         first_owner[name], ", ...)"));
    }
    for (const FileReads& read : files) {
      for (const storage::IoOp& op : read.ops) bytes_read_ += op.length;
    }
  }
  const absl::Time read = absl::Now();
  io_time_ += read - start;
  for (size_t i = 0; i < targets.size(); ++i) {
    const ChunkTarget& target = targets[i];
    if (target.chunk->length() == 0 || !IsEncoded(*target.chunk)) continue;
    if (absl::Status s = Decode(target, scratch + scratch_at[i]); !s.ok()) return s;
    stored_bytes_decoded_ += target.chunk->stored_length();
  }
  for (const ChunkTarget& target : targets) {
    if (target.chunk->length() == 0 || !target.chunk->has_delta_base()) continue;
    if (absl::Status s = ApplyDelta(target); !s.ok()) return s;
  }
  const absl::Time decoded = absl::Now();
  decode_time_ += decoded - read;
  for (const ChunkTarget& target : targets) {
    if (target.chunk->length() == 0) continue;
    if (absl::Status s = Verify(target); !s.ok()) return s;
    chunk_bytes_read_ += target.chunk->length();
  }
  verify_time_ += absl::Now() - decoded;
  return absl::OkStatus();
}

}  // namespace ckpt::storage
