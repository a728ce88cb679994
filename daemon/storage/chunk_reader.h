// Reading stored chunks back: a load group's chunks are read in one batch per
// file (the io_uring engine keeps them in flight together, as the writers
// do), and each chunk's CRC32C is checked before a byte is used. Fails closed: a mismatch is
// DATA_LOSS naming the file, the offset and the tensor or object, never silently delivered, and
// never echoing the checksum of the bytes that did not verify (that would make the error an oracle
// for the contents of whatever file a hostile manifest points at).
//
// Chunk file names come from the manifest, so files are opened with
// Backend::OpenReadOnlyBeneath (inside the checkpoint directory, no links
// followed, regular files only, never blocking on a FIFO), and every chunk's
// end is checked against its file's size before reading: a short file is
// DATA_LOSS naming the file and the offset.
//
// An encoded chunk (docs/compression.md) is read whole into the reader's
// scratch, its stored bytes' CRC32C checked, then decoded into the target
// (bounded by the chunk's raw length) and checked as any chunk is. A chunk
// that does not decode is DATA_LOSS naming the file, offset, owner and why.
//
// A step delta's chunk (docs/compression.md) is decoded, then XORed with the
// same chunk of its base step, a sibling directory of this one, read and
// checked the same way; the raw CRC32C is checked on the result. A base
// that is missing or damaged is DATA_LOSS naming this chunk and the base.
//
// Thread-safety: a ChunkReader is used by one thread; it caches open files.
#ifndef CKPT_DAEMON_STORAGE_CHUNK_READER_H_
#define CKPT_DAEMON_STORAGE_CHUNK_READER_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/storage/aligned_buffer.h"
#include "daemon/storage/backend.h"

namespace ckpt::storage {

// One chunk to read and where to: dst is alignment-aligned with room for
// the chunk's length rounded up to the alignment; `owner` names the tensor
// or object in errors.
struct ChunkTarget {
  const v1::StoredChunk* chunk = nullptr;
  absl::string_view owner;
  char* dst = nullptr;
};

class ChunkReader {
 public:
  ChunkReader(storage::Backend& backend, std::string checkpoint_dir, uint64_t alignment);

  // Reads every target, then verifies every checksum; the first error.
  absl::Status ReadAll(absl::Span<const ChunkTarget> targets);
  absl::Status Read(const v1::StoredChunk& chunk, absl::string_view owner, char* dst) {
    const ChunkTarget target{&chunk, owner, dst};
    return ReadAll({&target, 1});
  }
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t chunk_bytes_read() const { return chunk_bytes_read_; }  // without the padding
  // Encoded bytes decoded, and the time it took.
  uint64_t stored_bytes_decoded() const { return stored_bytes_decoded_; }
  absl::Duration decode_time() const { return decode_time_; }
  // Time spent waiting for reads and checking checksums, for the load's
  // summary line.
  absl::Duration io_time() const { return io_time_; }
  absl::Duration verify_time() const { return verify_time_; }

 private:
  struct OpenFile {
    std::unique_ptr<storage::ReadableFile> file;
    uint64_t size = 0;
  };
  // At most this many files stay open; a manifest may name many.
  static constexpr size_t kMaxOpenFiles = 64;

  absl::StatusOr<OpenFile*> Open(const std::string& name, absl::string_view owner);
  // The bytes to read for `target`: its length rounded up to whole aligned
  // blocks (so the read can bypass the page cache) where the file holds
  // them, else the exact length. DATA_LOSS when the file is too short.
  absl::StatusOr<uint64_t> ReadLength(const ChunkTarget& target, uint64_t file_size) const;
  absl::Status Verify(const ChunkTarget& target) const;
  // Checks an encoded chunk's stored bytes, then decodes them into its target.
  absl::Status Decode(const ChunkTarget& target, const char* stored) const;
  // A step delta: reads the base step's chunk (checked as any chunk is)
  // and XORs it into the target, which holds the decoded delta.
  absl::Status ApplyDelta(const ChunkTarget& target);

  storage::Backend& backend_;
  const std::string dir_;
  const uint64_t alignment_;
  std::map<std::string, OpenFile> files_;
  uint64_t bytes_read_ = 0;
  uint64_t chunk_bytes_read_ = 0;
  uint64_t stored_bytes_decoded_ = 0;
  AlignedBuffer scratch_;  // encoded chunks' stored bytes
  // Readers of the base steps of delta chunks, by step, and the room their
  // chunks are read into.
  std::map<int64_t, std::unique_ptr<ChunkReader>> base_readers_;
  AlignedBuffer base_scratch_;
  absl::Duration io_time_;
  absl::Duration decode_time_;
  absl::Duration verify_time_;
};

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_CHUNK_READER_H_
