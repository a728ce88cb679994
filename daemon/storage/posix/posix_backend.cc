#include "daemon/storage/posix/posix_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/lib/status_context.h"

namespace ckpt::storage {
namespace {

constexpr mode_t kFileMode = 0640;
constexpr mode_t kDirMode = 0750;

// The O_DIRECT twin of an fd; -1 (not an error) when the filesystem refuses
// O_DIRECT, which it says with EINVAL at open (tmpfs).
absl::StatusOr<int> OpenDirect(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC);
  if (fd >= 0) return fd;
  if (errno == EINVAL) return -1;
  return ErrnoStatus(errno, absl::StrCat("open ", path, " with O_DIRECT"));
}

absl::Status CloseFd(int fd, const std::string& path) {
  // No retry on EINTR: on Linux the fd is gone either way.
  if (::close(fd) != 0) return ErrnoStatus(errno, absl::StrCat("close ", path));
  return absl::OkStatus();
}

std::vector<EngineOp> ToEngineOps(absl::Span<const IoOp> ops, int fd, int direct_fd) {
  std::vector<EngineOp> out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    out[i] = EngineOp{fd, direct_fd, ops[i].offset, ops[i].buffer, ops[i].length, 0};
  }
  return out;
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, int direct_fd, std::shared_ptr<IoEngine> engine)
      : path_(std::move(path)), fd_(fd), direct_fd_(direct_fd), engine_(std::move(engine)) {}
  ~PosixWritableFile() override { Close().IgnoreError(); }

  absl::Status WriteAt(uint64_t offset, const void* data, size_t length) override {
    const IoOp op{offset, const_cast<void*>(data), length};
    return WriteBatch({&op, 1});
  }

  absl::Status WriteBatch(absl::Span<const IoOp> ops) override {
    if (fd_ < 0) return Closed("write");
    std::vector<EngineOp> engine_ops = ToEngineOps(ops, fd_, direct_fd_);
    return engine_->Run(IoKind::kWrite, absl::MakeSpan(engine_ops), path_);
  }

  // fdatasync covers the file size too, which is all a reader needs; both
  // fds share the inode, so syncing one flushes what either wrote.
  absl::Status Sync() override {
    if (fd_ < 0) return Closed("sync");
    if (::fdatasync(fd_) != 0) return ErrnoStatus(errno, absl::StrCat("fdatasync ", path_));
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    absl::Status s;
    if (direct_fd_ >= 0) s.Update(CloseFd(direct_fd_, path_));
    s.Update(CloseFd(fd_, path_));
    fd_ = direct_fd_ = -1;
    return s;
  }

 private:
  absl::Status Closed(absl::string_view op) const {
    return absl::FailedPreconditionError(absl::StrCat(op, " ", path_, ": file is closed"));
  }

  const std::string path_;
  int fd_;
  int direct_fd_;  // -1 without O_DIRECT
  const std::shared_ptr<IoEngine> engine_;
};

class PosixReadableFile : public ReadableFile {
 public:
  PosixReadableFile(std::string path, int fd, int direct_fd, std::shared_ptr<IoEngine> engine)
      : path_(std::move(path)), fd_(fd), direct_fd_(direct_fd), engine_(std::move(engine)) {}
  ~PosixReadableFile() override {
    if (direct_fd_ >= 0) ::close(direct_fd_);
    ::close(fd_);
  }

  absl::StatusOr<size_t> ReadAt(uint64_t offset, void* dst, size_t length) override {
    EngineOp op{fd_, direct_fd_, offset, dst, length, 0};
    absl::Status s = engine_->Run(IoKind::kRead, {&op, 1}, path_);
    if (!s.ok()) return s;
    return op.done;
  }

  absl::Status ReadBatch(absl::Span<const IoOp> ops) override {
    std::vector<EngineOp> engine_ops = ToEngineOps(ops, fd_, direct_fd_);
    absl::Status s = engine_->Run(IoKind::kRead, absl::MakeSpan(engine_ops), path_);
    if (!s.ok()) return s;
    for (const EngineOp& op : engine_ops) {
      if (op.done != op.length) {
        return absl::DataLossError(
            absl::StrFormat("short read %s at offset %d: wanted %d bytes, the file ends after %d",
                            path_, op.offset, op.length, op.done));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat ", path_));
    return static_cast<uint64_t>(st.st_size);
  }

 private:
  const std::string path_;
  const int fd_;
  const int direct_fd_;  // -1 without O_DIRECT
  const std::shared_ptr<IoEngine> engine_;
};

std::string ParentOf(const std::string& path) {
  size_t end = path.find_last_not_of('/');
  if (end == std::string::npos) return "";
  const size_t slash = path.find_last_of('/', end);
  if (slash == std::string::npos) return "";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// mkdir -p: try the path first, so that existing ancestors cost nothing.
absl::Status MakeDirs(const std::string& path) {
  if (::mkdir(path.c_str(), kDirMode) == 0) return absl::OkStatus();
  int err = errno;
  if (err == EEXIST && IsDirectory(path)) return absl::OkStatus();
  if (err == ENOENT) {
    const std::string parent = ParentOf(path);
    if (!parent.empty() && parent != path) {
      if (absl::Status s = MakeDirs(parent); !s.ok()) return s;
      if (::mkdir(path.c_str(), kDirMode) == 0) return absl::OkStatus();
      err = errno;
      if (err == EEXIST && IsDirectory(path)) return absl::OkStatus();  // lost a race: fine
    }
  }
  return ErrnoStatus(err, absl::StrCat("mkdir ", path));
}

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// ELOOP (and ENOTDIR from O_DIRECTORY on a link) is how O_NOFOLLOW reports a
// symbolic link: say so, since "too many levels" misleads.
absl::Status OpenBeneathError(int err, const std::string& component, const std::string& path) {
  if (err == ELOOP) {
    return absl::FailedPreconditionError(absl::StrCat(
        "open ", path, ": ", component, " is a symbolic link, which is not followed here"));
  }
  if (err == ENOTDIR) {
    return absl::FailedPreconditionError(absl::StrCat(
        "open ", path, ": ", component, " is not a directory (or is a symbolic link)"));
  }
  return ErrnoStatus(err, absl::StrCat("open ", path));
}

}  // namespace

PosixBackend::PosixBackend(const PosixBackendOptions& options)
    : options_(options), engine_(NewIoEngine({options.use_io_uring, options.queue_depth})) {}

absl::StatusOr<std::unique_ptr<WritableFile>> PosixBackend::NewWritableFile(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, kFileMode);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path, " for writing"));
  int direct_fd = -1;
  if (options_.use_o_direct) {
    absl::StatusOr<int> direct = OpenDirect(path, O_WRONLY);
    if (!direct.ok()) {
      ::close(fd);
      return direct.status();
    }
    direct_fd = *direct;
  }
  return std::make_unique<PosixWritableFile>(path, fd, direct_fd, engine_);
}

// O_NONBLOCK so that opening a FIFO returns at once instead of waiting for
// a writer; it changes nothing for a regular file, the only kind accepted.
absl::StatusOr<std::unique_ptr<ReadableFile>> PosixBackend::NewReadableFile(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  return FinishReadable(path, fd, /*regular_only=*/false,
                        [&](int flags) { return ::open(path.c_str(), flags); });
}

// The step directory is opened without following a link in its last
// component, and every component of name with O_NOFOLLOW through openat, so
// neither a symlinked data/ nor a symlinked file can lead out of it. (The
// names were validated: no "..", no absolute path.)
absl::StatusOr<std::unique_ptr<ReadableFile>> PosixBackend::OpenReadOnlyBeneath(
    const std::string& dir, const std::string& name) {
  const std::string path = absl::StrCat(dir, "/", name);
  if (absl::Status s = ValidateConfinedName(name); !s.ok()) {
    return WithContext(s, absl::StrCat("open ", path));
  }
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) return OpenBeneathError(errno, dir, path);
  absl::string_view rest = name;
  std::string walked = dir;
  for (size_t slash; (slash = rest.find('/')) != absl::string_view::npos;) {
    const std::string part(rest.substr(0, slash));
    absl::StrAppend(&walked, "/", part);
    const int next =
        ::openat(dir_fd, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    ::close(dir_fd);
    if (next < 0) return OpenBeneathError(err, walked, path);
    dir_fd = next;
    rest.remove_prefix(slash + 1);
  }
  const std::string leaf(rest);
  const int fd = ::openat(dir_fd, leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    ::close(dir_fd);
    return OpenBeneathError(err, path, path);
  }
  absl::StatusOr<std::unique_ptr<ReadableFile>> file = FinishReadable(
      path, fd, /*regular_only=*/true,
      [&](int flags) { return ::openat(dir_fd, leaf.c_str(), flags | O_NOFOLLOW | O_NONBLOCK); });
  ::close(dir_fd);
  return file;
}

// Checks the kind of file fd is (a regular file, or with !regular_only
// anything but a directory, FIFO or socket: reading those would block or
// fail later and vaguely) and opens its O_DIRECT twin with reopen(flags);
// the twin must be the same inode, or a rename between the two opens could
// pair this file with another. Takes ownership of fd.
absl::StatusOr<std::unique_ptr<ReadableFile>> PosixBackend::FinishReadable(
    const std::string& path, int fd, bool regular_only, const std::function<int(int)>& reopen) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("fstat ", path));
  }
  const bool refused = regular_only
                           ? !S_ISREG(st.st_mode)
                           : S_ISDIR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
  if (refused) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) return ErrnoStatus(EISDIR, absl::StrCat("open ", path));
    return absl::FailedPreconditionError(
        absl::StrCat("open ", path, ": not a regular file (", FileKind(st.st_mode), ")"));
  }
  int direct_fd = -1;
  if (options_.use_o_direct) {
    direct_fd = reopen(O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (direct_fd < 0 && errno != EINVAL) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, absl::StrCat("open ", path, " with O_DIRECT"));
    }
    struct stat direct_st;
    if (direct_fd >= 0 && (::fstat(direct_fd, &direct_st) != 0 || direct_st.st_ino != st.st_ino ||
                           direct_st.st_dev != st.st_dev)) {
      ::close(direct_fd);
      ::close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("open ", path, ": the file was replaced while it was being opened"));
    }
  }
  // Opened with O_NONBLOCK so that a FIFO could not hang the open; a regular
  // file's reads must block. With the flag io_uring answers EAGAIN instead
  // of waiting whenever the device queue is busy, and the engine's resubmit
  // loop then kept few reads in flight: loads ran at half the disk's rate.
  for (const int f : {fd, direct_fd}) {
    const int flags = f < 0 ? 0 : ::fcntl(f, F_GETFL);
    if (f >= 0 && (flags < 0 || ::fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0)) {
      const int err = errno;
      ::close(fd);
      if (direct_fd >= 0) ::close(direct_fd);
      return ErrnoStatus(err, absl::StrCat("clear O_NONBLOCK on ", path));
    }
  }
  return std::make_unique<PosixReadableFile>(path, fd, direct_fd, engine_);
}

absl::Status PosixBackend::CreateDirs(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("mkdir: empty path");
  return MakeDirs(path);
}

absl::Status PosixBackend::SyncDir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open directory ", path));
  absl::Status s;
  if (::fsync(fd) != 0) s = ErrnoStatus(errno, absl::StrCat("fsync directory ", path));
  s.Update(CloseFd(fd, path));
  return s;
}

absl::Status PosixBackend::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("rename ", from, " to ", to));
  }
  return absl::OkStatus();
}

absl::Status PosixBackend::RenameNoReplace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    return absl::OkStatus();
  }
  if (errno != EINVAL && errno != ENOSYS) {
    return ErrnoStatus(errno, absl::StrCat("rename ", from, " to ", to));
  }
  // A filesystem without RENAME_NOREPLACE (NFS): link(2) fails with EEXIST
  // just as atomically.
  if (::link(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("link ", from, " to ", to));
  }
  ::unlink(from.c_str());
  return absl::OkStatus();
}

absl::Status PosixBackend::RemoveAll(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return ErrnoStatus(ec.value(), absl::StrCat("remove ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> PosixBackend::ListDir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoStatus(errno, absl::StrCat("list directory ", path));
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  const int err = errno;
  ::closedir(dir);
  if (err != 0) return ErrnoStatus(err, absl::StrCat("list directory ", path));
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<bool> PosixBackend::Exists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT || errno == ENOTDIR) return false;
  return ErrnoStatus(errno, absl::StrCat("stat ", path));
}

namespace {

class FlockFileLock : public FileLock {
 public:
  explicit FlockFileLock(int fd) : fd_(fd) {}
  ~FlockFileLock() override { ::close(fd_); }  // closing the last fd drops the lock

 private:
  const int fd_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FileLock>> PosixBackend::LockFile(const std::string& path,
                                                                 LockMode mode, bool wait) {
  const bool exclusive = mode == LockMode::kExclusive;
  // O_NONBLOCK: a FIFO planted under the name cannot hang the open. An
  // exclusive lock opens for writing where it may: NFS emulates flock with
  // byte-range locks, whose exclusive kind needs a writable fd.
  int fd = -1;
  if (exclusive) fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path, " to lock it"));
  const int operation = (exclusive ? LOCK_EX : LOCK_SH) | (wait ? 0 : LOCK_NB);
  int rc;
  do {
    rc = ::flock(fd, operation);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("lock ", path, ": locked by another holder"));
    }
    return ErrnoStatus(err, absl::StrCat("lock ", path));
  }
  auto held = std::make_unique<FlockFileLock>(fd);
  // Renamed or removed while this waited: the path no longer names it.
  struct stat locked, named;
  if (::fstat(fd, &locked) != 0) return ErrnoStatus(errno, absl::StrCat("stat ", path));
  if (::stat(path.c_str(), &named) != 0) {
    return ErrnoStatus(errno, absl::StrCat("lock ", path, ": gone once locked"));
  }
  if (named.st_ino != locked.st_ino || named.st_dev != locked.st_dev) {
    return absl::NotFoundError(absl::StrCat("lock ", path, ": replaced while being locked"));
  }
  return held;
}

absl::StatusOr<absl::Time> PosixBackend::ModifiedTime(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("stat ", path));
  return absl::TimeFromTimespec(st.st_mtim);
}

absl::Status PosixBackend::RegisterMemory(void* base, size_t bytes, size_t piece_bytes) {
  RegisterFixedBuffers(base, bytes, piece_bytes);
  return absl::OkStatus();
}

void PosixBackend::RenewMemory(void* base, size_t bytes) { RenewFixedBuffers(base, bytes); }

}  // namespace ckpt::storage
