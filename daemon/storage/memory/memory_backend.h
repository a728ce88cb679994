// In-memory backend: the reference semantics every backend must match, and
// the host-memory tier of checkpoints.
//
// Files are shared inodes: an open file object keeps its inode even after the
// name is renamed or removed, as an open fd does on POSIX. Paths are
// normalized ("a//b/", "/a/./b" -> "/a/b"; relative paths are taken from
// "/"), and "/" always exists. Sync and SyncDir only check that the target
// exists: everything here is "durable" until the process ends.
//
// An inode holds its bytes in a memfd of its own, counted in fixed-size
// blocks as they are first written: a file of GiBs grows without being
// copied, and a range never written reads as zeros without costing memory.
// The backend counts the bytes of the blocks it holds, over all files,
// including removed ones still open (an inode's blocks go when its last
// reference does), and refuses a write that would take it past its budget
// before allocating anything. Being kernel memory, a file can be shared
// read-only with another process (Share): the memory tier's zero-copy
// loads.
//
// Thread-safety: all Backend methods are safe from any thread, and do no
// copying or freeing of file data under the backend-wide lock. A file object
// may be used by one thread at a time; readers and writers of one path may
// run concurrently: each inode has its own lock, shared by readers and held
// alone by a write.
#ifndef CKPT_DAEMON_STORAGE_MEMORY_MEMORY_BACKEND_H_
#define CKPT_DAEMON_STORAGE_MEMORY_MEMORY_BACKEND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/storage/backend.h"

namespace ckpt::storage {

struct MemoryBackendOptions {
  // Bytes of blocks the backend may hold over all its files (whole blocks: a
  // 1-byte file holds one). A write that needs more is RESOURCE_EXHAUSTED.
  // 0: no limit.
  uint64_t budget_bytes = 0;
  // Size of the blocks a file is held in. 0 is taken as the default: a
  // page, so many small files (a step's MANIFEST, LATEST) cost what they
  // hold; a store of large files sets larger blocks (the memory tier).
  uint64_t block_bytes = uint64_t{4} << 10;
};

class MemoryBackend : public Backend {
 public:
  struct Inode;  // defined in the .cc

  explicit MemoryBackend(MemoryBackendOptions options = {});
  ~MemoryBackend() override;

  // A file's bytes mapped read-only here, with a read-only descriptor of
  // them for another process to map (the memory is made owner-read-only,
  // so another user cannot reopen it for writing). Mapped memory stays
  // valid while it lives: a rewritten or removed file takes new memory, and
  // its old pages are punched out (they read as zeros), so no process
  // keeping the descriptor pins memory the budget no longer counts.
  struct SharedFile {
    SharedFile() = default;
    ~SharedFile();
    SharedFile(const SharedFile&) = delete;
    SharedFile& operator=(const SharedFile&) = delete;
    const char* data = nullptr;  // null for an empty file
    uint64_t size = 0;
    int fd = -1;  // O_RDONLY; -1 for an empty file
  };
  // NOT_FOUND when no such file.
  absl::StatusOr<std::shared_ptr<const SharedFile>> Share(const std::string& path);

  // Bytes of blocks held now, by all files, removed-but-open ones included.
  uint64_t bytes_held() const;
  // options.budget_bytes; 0: no limit.
  uint64_t budget_bytes() const { return options_.budget_bytes; }

  std::string Name() const override { return "memory"; }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override;
  absl::Status CreateDirs(const std::string& path) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status RenameNoReplace(const std::string& from, const std::string& to) override;
  absl::Status RemoveAll(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override;
  absl::StatusOr<bool> Exists(const std::string& path) override;

 private:
  struct Budget;  // defined in the .cc; shared with the inodes

  bool IsDirLocked(const std::string& p) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool IsFileLocked(const std::string& p) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool HasChildrenLocked(const std::string& dir) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Moves the inodes it unlinks to *unlinked, so the caller lets them go
  // (and frees their blocks) after unlocking.
  void RemoveTreeLocked(const std::string& p, std::vector<std::shared_ptr<Inode>>* unlinked)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MemoryBackendOptions options_;
  const std::shared_ptr<Budget> budget_;

  mutable absl::Mutex mu_;
  absl::Mutex no_replace_mu_;  // one RenameNoReplace at a time: check and rename as one
  std::map<std::string, std::shared_ptr<Inode>> files_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirs_ ABSL_GUARDED_BY(mu_);  // always holds "/"
};

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_MEMORY_MEMORY_BACKEND_H_
