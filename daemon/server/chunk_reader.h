// Reading stored chunks back: one read per chunk, CRC32C checked before a
// byte is used. Fails closed: a mismatch is DATA_LOSS naming the file, the
// offset and the tensor or object, never silently delivered.
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
  storage::Backend& backend_;
  const std::string dir_;
  const uint64_t alignment_;
  std::map<std::string, std::unique_ptr<storage::ReadableFile>> files_;
  uint64_t bytes_read_ = 0;
};

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_CHUNK_READER_H_
