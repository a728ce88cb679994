// In-memory backend: the reference semantics every backend must match.
//
// Files are shared byte buffers ("inodes"): an open file object keeps its
// buffer even after the name is renamed or removed, as an open fd does on
// POSIX. Paths are normalized ("a//b/", "/a/./b" -> "/a/b"; relative paths
// are taken from "/"), and "/" always exists. Sync and SyncDir only check
// that the target exists: everything here is "durable" until the process
// ends.
//
// Thread-safety: all Backend methods are safe from any thread; a file object
// may be used by one thread at a time, and readers and writers of one path
// may run concurrently (each buffer has its own lock).
#ifndef CKPT_DAEMON_STORAGE_MEMORY_MEMORY_BACKEND_H_
#define CKPT_DAEMON_STORAGE_MEMORY_MEMORY_BACKEND_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/storage/backend.h"

namespace ckpt::storage {

class MemoryBackend : public Backend {
 public:
  struct Inode;  // defined in the .cc

  MemoryBackend();
  ~MemoryBackend() override;

  std::string Name() const override { return "memory"; }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override;
  absl::Status CreateDirs(const std::string& path) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status RemoveAll(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override;
  absl::StatusOr<bool> Exists(const std::string& path) override;

 private:
  bool IsDirLocked(const std::string& p) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool IsFileLocked(const std::string& p) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool HasChildrenLocked(const std::string& dir) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RemoveTreeLocked(const std::string& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Inode>> files_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirs_ ABSL_GUARDED_BY(mu_);  // always holds "/"
};

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_MEMORY_MEMORY_BACKEND_H_
