// A Backend decorator that injects storage faults, for tests of everything
// above the storage layer (commit protocol, writers, loaders). Production
// backends carry no test hooks; wrap them in this instead.
//
// Faults (each stays set until changed; ClearFaults() turns all off):
//  - Sync: the n-th file Sync() from now fails once, or every Sync() fails;
//    SyncDir() can fail too. A failed sync does not reach the wrapped backend,
//    so the data stays unsynced (see DropUnsyncedData).
//  - Disk full: once a byte budget of writes is spent, a write that does not
//    fit fails whole with RESOURCE_EXHAUSTED "No space left on device".
//  - Read errors: every read fails with an I/O error.
//  - Corruption: reads of one path return the stored bytes with one bit
//    flipped; the stored bytes are not changed.
// Injected errors read like real ones ("fsync /p/x: Input/output error") with
// "(injected fault)" appended, and use the codes the POSIX backend would.
//
// Crash simulation (leveldb's FaultInjectionTestEnv): DropUnsyncedData()
// rewrites every file written through this decorator to its contents at its
// last successful Sync() (empty if never synced). Renames and removals made
// through the decorator are followed; directory entries are treated as
// durable at once (SyncDir is not modelled). Costs memory: the synced
// contents and the unsynced writes of each such file are kept. Paths are
// matched as spelled: use one spelling per file.
//
// Thread-safety: all methods are safe from any thread; files as in Backend.
// The wrapped backend must outlive this decorator and every file it opened.
#ifndef CKPT_DAEMON_STORAGE_FAULT_INJECTION_H_
#define CKPT_DAEMON_STORAGE_FAULT_INJECTION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/storage/backend.h"

namespace ckpt::storage {
namespace internal {
class FaultWritableFile;
class FaultReadableFile;
}  // namespace internal

class FaultInjectionBackend : public Backend {
 public:
  struct TrackedFile;  // defined in the .cc

  // Does not own target.
  explicit FaultInjectionBackend(Backend* target);
  // Owns target.
  explicit FaultInjectionBackend(std::unique_ptr<Backend> target);
  ~FaultInjectionBackend() override;

  // The n-th file Sync() from now (1: the next one) fails; n <= 0 disarms.
  void FailNthSync(int n);
  void FailAllSyncs(bool on);
  void FailSyncDirs(bool on);
  // Writes may use `bytes` more bytes; later ones fail. nullopt: no limit.
  void SetWriteBudget(std::optional<uint64_t> bytes);
  void FailReads(bool on);
  // Reads of path flip bit 0 of the byte at file_offset (reads not covering
  // it are intact) or, without an offset, of the first byte of every read.
  void CorruptReads(const std::string& path, std::optional<uint64_t> file_offset = std::nullopt);
  void ClearFaults();

  // Call once the "crashed" writers are done; their file objects must not
  // be used afterwards. Returns the first error from the wrapped backend.
  absl::Status DropUnsyncedData();

  std::string Name() const override;
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
  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path, LockMode mode,
                                                     bool wait) override {
    return target_->LockFile(path, mode, wait);
  }
  absl::StatusOr<absl::Time> ModifiedTime(const std::string& path) override {
    return target_->ModifiedTime(path);
  }
  absl::Status RegisterMemory(void* base, size_t bytes, size_t piece_bytes) override {
    return target_->RegisterMemory(base, bytes, piece_bytes);
  }
  void RenewMemory(void* base, size_t bytes) override { target_->RenewMemory(base, bytes); }
  void PrepareThread() override { target_->PrepareThread(); }

 private:
  friend class internal::FaultWritableFile;
  friend class internal::FaultReadableFile;

  // Hooks for the file objects: check faults, record writes and syncs.
  absl::Status BeforeWrite(const std::string& path, uint64_t offset, size_t length);
  void AfterWrite(TrackedFile& file, absl::Span<const IoOp> ops, bool ok);
  absl::Status BeforeSync(const std::string& path);
  void AfterSync(TrackedFile& file);
  absl::Status BeforeRead(const std::string& path, uint64_t offset);
  void AfterRead(const std::string& path, uint64_t offset, void* data, size_t length);

  std::unique_ptr<Backend> owned_;
  Backend* const target_;

  absl::Mutex mu_;
  int syncs_until_failure_ ABSL_GUARDED_BY(mu_) = 0;  // 0: disarmed
  bool fail_all_syncs_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_sync_dirs_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<uint64_t> write_budget_ ABSL_GUARDED_BY(mu_);
  bool fail_reads_ ABSL_GUARDED_BY(mu_) = false;
  // path -> offset of the flipped byte (nullopt: first byte of each read).
  std::map<std::string, std::optional<uint64_t>> corrupt_ ABSL_GUARDED_BY(mu_);
  // Files written through this decorator, by current path.
  std::map<std::string, std::shared_ptr<TrackedFile>> tracked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_FAULT_INJECTION_H_
