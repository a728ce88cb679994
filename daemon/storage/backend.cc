// Default batch operations and the whole-file helpers.
//
// WriteFileAtomically is the building block of the commit protocol (LATEST,
// small metadata files):
//   1. write path + ".tmp" (truncating any leftover from a crash),
//   2. Sync it: the new bytes are durable before any name points at them,
//   3. Close it: a close error (e.g. delayed write-back failure on NFS) is
//      still a failure of this write,
//   4. Rename it over path: rename(2) is atomic, so readers see the old file
//      or the new one, never a mix,
//   5. SyncDir(parent): the rename itself is durable; without it a crash can
//      bring the old name back.
// On failure the temporary file is removed (best effort) and path is untouched.
#include "daemon/storage/backend.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "proto/lib/secure_random.h"
#include "proto/lib/status_context.h"

namespace ckpt::storage {

absl::Status Backend::RenameNoReplace(const std::string& from, const std::string& to) {
  absl::StatusOr<bool> exists = Exists(to);
  if (!exists.ok()) return exists.status();
  if (*exists)
    return absl::AlreadyExistsError(absl::StrCat("rename ", from, " to ", to, ": exists"));
  return Rename(from, to);
}
namespace {

// The default LockFile: locks of this process, by path. Backends that live
// in this process only (memory) need no more; the others override it.
class ProcessLocks {
 public:
  static ProcessLocks& Get() {
    static ProcessLocks* locks = new ProcessLocks;  // never destroyed: locks may outlive main
    return *locks;
  }
  // False when !wait and the lock is taken in a conflicting mode.
  bool Acquire(const std::string& path, LockMode mode, bool wait) {
    absl::MutexLock lock(&mu_);
    struct Args {
      ProcessLocks* self;
      const std::string* path;
      LockMode mode;
    } args{this, &path, mode};
    const absl::Condition free(
        +[](Args* a)
             ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->self->FreeLocked(*a->path, a->mode); },
        &args);
    if (!wait && !free.Eval()) return false;
    mu_.Await(free);
    Holders& h = held_[path];
    if (mode == LockMode::kExclusive) {
      h.exclusive = true;
    } else {
      ++h.shared;
    }
    return true;
  }
  void Release(const std::string& path, LockMode mode) {
    absl::MutexLock lock(&mu_);
    auto it = held_.find(path);
    if (it == held_.end()) return;
    if (mode == LockMode::kExclusive) {
      it->second.exclusive = false;
    } else if (it->second.shared > 0) {
      --it->second.shared;
    }
    if (!it->second.exclusive && it->second.shared == 0) held_.erase(it);
  }

 private:
  struct Holders {
    int shared = 0;
    bool exclusive = false;
  };
  bool FreeLocked(const std::string& path, LockMode mode) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = held_.find(path);
    if (it == held_.end()) return true;
    return mode == LockMode::kShared ? !it->second.exclusive
                                     : !it->second.exclusive && it->second.shared == 0;
  }
  absl::Mutex mu_;
  std::map<std::string, Holders> held_ ABSL_GUARDED_BY(mu_);
};

class ProcessFileLock : public FileLock {
 public:
  ProcessFileLock(std::string path, LockMode mode) : path_(std::move(path)), mode_(mode) {}
  ~ProcessFileLock() override { ProcessLocks::Get().Release(path_, mode_); }

 private:
  const std::string path_;
  const LockMode mode_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FileLock>> Backend::LockFile(const std::string& path, LockMode mode,
                                                            bool wait) {
  const auto missing = [&] {
    return absl::NotFoundError(absl::StrCat("lock ", path, ": No such file or directory"));
  };
  absl::StatusOr<bool> exists = Exists(path);
  if (!exists.ok()) return exists.status();
  if (!*exists) return missing();
  if (!ProcessLocks::Get().Acquire(path, mode, wait)) {
    return absl::UnavailableError(absl::StrCat("lock ", path, ": locked by another holder"));
  }
  auto held = std::make_unique<ProcessFileLock>(path, mode);
  // Renamed or removed while this waited: the path no longer names it.
  exists = Exists(path);
  if (!exists.ok()) return exists.status();
  if (!*exists) return missing();
  return held;
}

absl::StatusOr<absl::Time> Backend::ModifiedTime(const std::string& path) {
  return absl::UnimplementedError(
      absl::StrCat("modification time of ", path, ": the ", Name(), " backend keeps none"));
}

absl::Status WritableFile::WriteBatch(absl::Span<const IoOp> ops) {
  for (const IoOp& op : ops) {
    absl::Status s = WriteAt(op.offset, op.buffer, op.length);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ReadableFile::ReadBatch(absl::Span<const IoOp> ops) {
  for (const IoOp& op : ops) {
    absl::StatusOr<size_t> n = ReadAt(op.offset, op.buffer, op.length);
    if (!n.ok()) return n.status();
    if (*n != op.length) {
      return absl::DataLossError(
          absl::StrFormat("short read at offset %d: wanted %d bytes, the file ends after %d",
                          op.offset, op.length, *n));
    }
  }
  return absl::OkStatus();
}

absl::Status Backend::ReadFiles(absl::Span<const FileReads> reads, size_t* failed) {
  for (size_t i = 0; i < reads.size(); ++i) {
    if (absl::Status s = reads[i].file->ReadBatch(reads[i].ops); !s.ok()) {
      *failed = i;
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReadableFile>> Backend::OpenReadOnlyBeneath(
    const std::string& dir, const std::string& name) {
  if (absl::Status s = ValidateConfinedName(name); !s.ok()) {
    return WithContext(s, absl::StrCat("open ", dir, "/", name));
  }
  return NewReadableFile(absl::StrCat(dir, "/", name));
}

namespace {

// Reads all of an open file, refusing one larger than max_bytes before
// allocating for it. The file's own errors name its path already.
absl::StatusOr<std::string> ReadAll(ReadableFile& file, const std::string& path,
                                    uint64_t max_bytes) {
  absl::StatusOr<uint64_t> size = file.Size();
  if (!size.ok()) return size.status();
  if (*size > max_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "read %s: the file is %d bytes, more than the limit of %d", path, *size, max_bytes));
  }
  std::string contents(*size, '\0');
  if (*size > 0) {
    IoOp op{0, contents.data(), contents.size()};
    if (absl::Status s = file.ReadBatch({&op, 1}); !s.ok()) return s;
  }
  return contents;
}

}  // namespace

absl::StatusOr<std::string> ReadWholeFileBeneath(Backend& backend, const std::string& dir,
                                                 const std::string& name, uint64_t max_bytes) {
  absl::StatusOr<std::unique_ptr<ReadableFile>> file = backend.OpenReadOnlyBeneath(dir, name);
  if (!file.ok()) return file.status();
  return ReadAll(**file, absl::StrCat(dir, "/", name), max_bytes);
}

absl::StatusOr<std::string> ReadWholeFile(Backend& backend, const std::string& path,
                                          uint64_t max_bytes) {
  absl::StatusOr<std::unique_ptr<ReadableFile>> file = backend.NewReadableFile(path);
  if (!file.ok()) return file.status();
  return ReadAll(**file, path, max_bytes);
}

namespace {

std::string ParentDir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status WriteTmp(Backend& backend, const std::string& tmp, const std::string& contents) {
  absl::StatusOr<std::unique_ptr<WritableFile>> file = backend.NewWritableFile(tmp);
  if (!file.ok()) return file.status();
  absl::Status s = (*file)->WriteAt(0, contents.data(), contents.size());
  if (s.ok()) s = (*file)->Sync();
  absl::Status close = (*file)->Close();
  return s.ok() ? close : s;
}

}  // namespace

absl::Status Backend::CreateFileExclusive(const std::string& path, const std::string& contents) {
  // A name of its own: several hosts may create the same file at once.
  const std::string tmp = absl::StrCat(path, ".new-", RandomHex(8));
  absl::Status s = WriteTmp(*this, tmp, contents);
  if (s.ok()) s = RenameNoReplace(tmp, path);
  if (!s.ok()) {
    RemoveAll(tmp).IgnoreError();
    return s;
  }
  const size_t slash = path.rfind('/');
  return SyncDir(slash == std::string::npos ? "." : path.substr(0, slash));
}

absl::Status WriteFileAtomically(Backend& backend, const std::string& path,
                                 const std::string& contents) {
  const std::string context = absl::StrCat("write file atomically ", path);
  if (backend.IsObjectStore()) {
    // One PUT: the object is replaced whole or not at all.
    return WriteTmp(backend, path, contents);
  }
  const std::string tmp = path + ".tmp";
  absl::Status s = WriteTmp(backend, tmp, contents);
  if (s.ok()) s = backend.Rename(tmp, path);
  if (!s.ok()) {
    backend.RemoveAll(tmp).IgnoreError();  // best effort; the error below matters
    return WithContext(s, context);
  }
  return WithContext(backend.SyncDir(ParentDir(path)), context);
}

}  // namespace ckpt::storage
