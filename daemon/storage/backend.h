// Storage backend interface: where checkpoint files live.
//
// Two implementations, picked by an explicit factory (backend_factory.h):
// POSIX files written through io_uring (posix/), and an in-memory backend
// (memory/) that is the reference every backend must match; one conformance
// suite (tests/unit/daemon/storage/backend_conformance_test.cc) runs against
// each. Faults are injected by a wrapping backend (fault_injection.h), never
// by test-only methods here.
//
// Paths are '/'-separated strings; the POSIX backend uses them as given.
// Every error names the operation and the path ("open /x/MANIFEST: No such
// file or directory"), with a code from the errno (status_context.h), so
// callers add what they know beyond that, never the path again.
//
// Thread-safety: a Backend may be used from many threads at once. A file
// object may be used by one thread at a time; different file objects of the
// same path may be used concurrently (the commit protocol never does).
#ifndef CKPT_DAEMON_STORAGE_BACKEND_H_
#define CKPT_DAEMON_STORAGE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/lib/validation.h"

namespace ckpt::storage {

// One write or read of a batch. Backends that can (io_uring) keep many in
// flight; the others run them one after another.
struct IoOp {
  uint64_t offset = 0;
  void* buffer = nullptr;  // const for writes
  size_t length = 0;
};

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes data at offset; the file grows as needed. Complete or error.
  virtual absl::Status WriteAt(uint64_t offset, const void* data, size_t length) = 0;
  // All ops complete (or the first error is returned). Ops must not overlap.
  virtual absl::Status WriteBatch(absl::Span<const IoOp> ops);
  // Durable: data and size reach stable storage (fsync).
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
  // The writes are not wanted (an aborted save): the default closes the
  // file; an object store abandons the upload, so that nothing appears and
  // no holes are sent.
  virtual void Abandon() { (void)Close(); }
};

class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  // Reads up to length bytes at offset; returns the count, short only at EOF.
  virtual absl::StatusOr<size_t> ReadAt(uint64_t offset, void* dst, size_t length) = 0;
  // Each op must be satisfied in full; a short read is a DATA_LOSS error.
  virtual absl::Status ReadBatch(absl::Span<const IoOp> ops);
  virtual absl::StatusOr<uint64_t> Size() = 0;
};

// One file's part of a read over several files (Backend::ReadFiles).
struct FileReads {
  ReadableFile* file = nullptr;
  absl::Span<const IoOp> ops;
};

// An advisory lock on a file (Backend::LockFile), held until destroyed.
class FileLock {
 public:
  virtual ~FileLock() = default;
};
enum class LockMode { kShared, kExclusive };

// Requests a backend that talks to a server (S3) made since it started.
struct RequestCounts {
  std::string backend;  // the metrics label: "s3"
  uint64_t requests = 0;
  uint64_t retries = 0;
  uint64_t throttles = 0;  // answers asking to slow down (503 SlowDown, 429)
  uint64_t failures = 0;   // requests that gave up
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;
  // An object store (S3): no rename, no directories of their own; a whole
  // file written at once is atomic. The commit protocol writes a commit
  // object instead of renaming (step_location.h, coordinator/commit.h).
  virtual bool IsObjectStore() const { return false; }
  // Counts of requests to a server; nullopt for backends without one.
  virtual std::optional<RequestCounts> Requests() const { return std::nullopt; }

  // Creates (or truncates) a file for writing. The parent directory must exist.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // NOT_FOUND when the file does not exist; FAILED_PRECONDITION for a
  // directory, FIFO or socket (opening never blocks, even on a FIFO).
  virtual absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(
      const std::string& path) = 0;
  // Opens `name` inside the trusted directory `dir` for reading, where name
  // comes from untrusted input (a manifest): it must pass
  // ValidateConfinedName, and the file must be a regular file reached
  // without following a symbolic link, neither `dir` itself nor any
  // component of name (FAILED_PRECONDITION otherwise). Never blocks on a
  // FIFO. The default composes the path and calls NewReadableFile, which is
  // right for backends without links or special files (memory).
  virtual absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadOnlyBeneath(
      const std::string& dir, const std::string& name);

  // Creates the directory and any missing parents; OK if it exists.
  virtual absl::Status CreateDirs(const std::string& path) = 0;
  // Makes the directory's entries (creates, renames) durable.
  virtual absl::Status SyncDir(const std::string& path) = 0;
  // Atomically renames a file or directory; replaces an existing file `to`.
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // Renames a file only if `to` does not exist (ALREADY_EXISTS otherwise),
  // atomically: of several hosts creating one record on a shared root,
  // exactly one wins. The default checks then renames (not atomic): for
  // backends that cannot do better.
  virtual absl::Status RenameNoReplace(const std::string& from, const std::string& to);
  // Creates a file holding contents if none exists at path, atomically
  // (ALREADY_EXISTS otherwise): of several writers, exactly one succeeds.
  // The default writes a temporary file and RenameNoReplace-s it.
  virtual absl::Status CreateFileExclusive(const std::string& path, const std::string& contents);
  // Files under dir (paths, any depth) that a writer began and never
  // finished: an object store's multipart uploads, which hold space but are
  // not objects (a killed daemon leaves them). RemoveAll of a directory
  // ends those under it too. Empty on a filesystem (the default).
  virtual absl::StatusOr<std::vector<std::string>> ListUnfinishedFiles(const std::string& dir) {
    return std::vector<std::string>{};
  }
  // Removes a file or a directory tree; OK if it does not exist.
  virtual absl::Status RemoveAll(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, sorted. NOT_FOUND if absent.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;
  virtual absl::StatusOr<bool> Exists(const std::string& path) = 0;

  // Locks an existing file, shared (any number of holders) or exclusive (one
  // holder, no shared ones), until the FileLock is destroyed: loads and
  // exports pin a checkpoint with it, and garbage collection never deletes a
  // pinned one (daemon/coordinator/retention.h). Locks exclude each other
  // across processes where the backend can (POSIX: flock(2), which also
  // excludes two opens of one process) and within the process on every
  // backend (the default: a table in this process, right for memory).
  // wait = false: UNAVAILABLE when the file is locked in a conflicting mode.
  // NOT_FOUND when the file does not exist, or no longer does under that
  // path once the lock is held (renamed or removed meanwhile), so a holder
  // knows the path still names what it locked.
  virtual absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path, LockMode mode,
                                                             bool wait);
  // When the file or directory was last modified. UNIMPLEMENTED where the
  // backend does not keep it (the default, memory).
  virtual absl::StatusOr<absl::Time> ModifiedTime(const std::string& path);

  // Each file's ReadBatch, for files this backend opened; on failure
  // *failed is the index of a file whose reads failed. The default reads
  // one file after another; an object store overlaps them all, its
  // requests being slow to answer but cheap to run side by side.
  virtual absl::Status ReadFiles(absl::Span<const FileReads> reads, size_t* failed);

  // Memory that most transfers will come from or go to (the daemon's pool):
  // a backend that can pre-register it with the kernel does so once
  // (io_uring fixed buffers), in pieces of `piece_bytes` (the pool's
  // segments). Optional; the default does nothing.
  virtual absl::Status RegisterMemory(void* base, size_t bytes, size_t piece_bytes) {
    return absl::OkStatus();
  }
  // Part of the registered memory has new pages at the same addresses (a
  // pool segment renewed); no transfer into it is in flight. Optional.
  virtual void RenewMemory(void* base, size_t bytes) {}
  // Called once by each thread that will move data (writers, readers), after
  // RegisterMemory: sets up that thread's I/O now, so the first save or load
  // does not wait for it. Optional; the default does nothing.
  virtual void PrepareThread() {}
};

// Names a backend opens, checked as ValidateConfinedName (proto/lib/validation.h)
// does: the rule is the manifest's, so it lives below both.
using ::ckpt::ValidateConfinedName;

// Whole-file helpers on top of any backend.
// FAILED_PRECONDITION naming the file and the bound, before anything is
// allocated, when the file is larger than max_bytes.
absl::StatusOr<std::string> ReadWholeFile(Backend& backend, const std::string& path,
                                          uint64_t max_bytes = UINT64_MAX);
// The whole of `name` in `dir`, opened with OpenReadOnlyBeneath; max_bytes
// as above.
absl::StatusOr<std::string> ReadWholeFileBeneath(Backend& backend, const std::string& dir,
                                                 const std::string& name, uint64_t max_bytes);
// Writes path + ".tmp", fsyncs it, renames it over path, fsyncs the parent
// directory: readers see the old contents or the new, never a mix.
absl::Status WriteFileAtomically(Backend& backend, const std::string& path,
                                 const std::string& contents);

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_BACKEND_H_
