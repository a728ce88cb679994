// Reading stored chunks back: one read per chunk, CRC32C checked before a
// byte is used. Fails closed: a mismatch is DATA_LOSS naming the file, the
// offset and the tensor or object, never silently delivered, and never
// echoing the checksum of the bytes that did not verify (that would make
// the error an oracle for the contents of whatever file a hostile manifest
// points at).
//
// Chunk file names come from the manifest, so files are opened with
// Backend::OpenReadOnlyBeneath (inside the checkpoint directory, no links
// followed, regular files only, never blocking on a FIFO), and every chunk's
// end is checked against its file's size before reading: a short file is
// DATA_LOSS naming the file and the offset.
//
// Thread-safety: a ChunkReader is used by one thread; it caches open files.
#ifndef CKPT_DAEMON_SERVER_CHUNK_READER_H_
#define CKPT_DAEMON_SERVER_CHUNK_READER_H_

#include <map>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/storage/backend.h"

namespace ckpt::server {

class ChunkReader {
 public:
  ChunkReader(storage::Backend& backend, std::string checkpoint_dir, uint64_t alignment);

  // Reads chunk into dst, which is alignment-aligned with room for the
  // chunk's length rounded up to the alignment; `owner` names the tensor
  // or object in errors.
  absl::Status Read(const v1::StoredChunk& chunk, absl::string_view owner, char* dst);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  struct OpenFile {
    std::unique_ptr<storage::ReadableFile> file;
    uint64_t size = 0;
  };
  // At most this many files stay open; a manifest may name many.
  static constexpr size_t kMaxOpenFiles = 64;

  absl::StatusOr<OpenFile*> Open(const std::string& name, absl::string_view owner);

  storage::Backend& backend_;
  const std::string dir_;
  const uint64_t alignment_;
  std::map<std::string, OpenFile> files_;
  uint64_t bytes_read_ = 0;
};

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_CHUNK_READER_H_
