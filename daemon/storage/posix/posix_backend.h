// POSIX files, written and read through an IoEngine (io_uring or
// pread/pwrite, see io_engine.h).
//
// With use_o_direct, each file is opened twice: buffered, and with O_DIRECT
// when the filesystem accepts it (tmpfs answers EINVAL: then everything is
// buffered). Ops whose buffer address, offset and length are multiples of
// 4096 bypass the page cache; the rest (headers, tails) go through it. Both
// fds reach the same inode, so one fdatasync makes both kinds durable.
//
// Errors name the operation and the path ("pwrite /x/data/h-0.bin at offset
// 4096: No space left on device"); codes follow errno (proto/lib/status_context.h).
//
// Thread-safety: as Backend. Files hold a reference to the engine, so they
// may outlive the backend.
#ifndef CKPT_DAEMON_STORAGE_POSIX_POSIX_BACKEND_H_
#define CKPT_DAEMON_STORAGE_POSIX_POSIX_BACKEND_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/storage/backend.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/posix/io_engine.h"

namespace ckpt::storage {

class PosixBackend : public Backend {
 public:
  explicit PosixBackend(const PosixBackendOptions& options);

  std::string Name() const override { return "posix"; }
  // The engine in use, after any fallback: engine().Name() says which.
  const IoEngine& engine() const { return *engine_; }
  void PrepareThread() override { engine_->PrepareThread(); }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadOnlyBeneath(
      const std::string& dir, const std::string& name) override;
  absl::Status CreateDirs(const std::string& path) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status RenameNoReplace(const std::string& from, const std::string& to) override;
  absl::Status RemoveAll(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override;
  absl::StatusOr<bool> Exists(const std::string& path) override;
  // flock(2) on the file, so loads, exports and gc of different processes
  // see each other's locks.
  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path, LockMode mode,
                                                     bool wait) override;
  absl::StatusOr<absl::Time> ModifiedTime(const std::string& path) override;
  // Registers the memory as io_uring fixed buffers (RegisterFixedBuffers).
  absl::Status RegisterMemory(void* base, size_t bytes, size_t piece_bytes) override;
  void RenewMemory(void* base, size_t bytes) override;

 private:
  absl::StatusOr<std::unique_ptr<ReadableFile>> FinishReadable(
      const std::string& path, int fd, bool regular_only, const std::function<int(int)>& reopen);

  const PosixBackendOptions options_;
  const std::shared_ptr<IoEngine> engine_;
};

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_POSIX_POSIX_BACKEND_H_
