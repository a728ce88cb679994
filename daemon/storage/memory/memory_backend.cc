#include "daemon/storage/memory/memory_backend.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "proto/lib/status_context.h"

namespace ckpt::storage {

// A file's bytes; shared by the name table and every open file object.
struct MemoryBackend::Inode {
  absl::Mutex mu;
  std::string data ABSL_GUARDED_BY(mu);
};

namespace {

// Far beyond any test, well below what std::string::resize would throw on.
constexpr uint64_t kMaxFileSize = uint64_t{1} << 40;

std::string Normalize(const std::string& path) {
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  std::string out;
  for (absl::string_view part : parts) absl::StrAppend(&out, "/", part);
  return out.empty() ? "/" : out;
}

std::string Parent(const std::string& normalized) {
  const size_t slash = normalized.find_last_of('/');
  return slash == 0 ? "/" : normalized.substr(0, slash);
}

// Every entry below dir starts with this.
std::string ChildPrefix(const std::string& dir) { return dir == "/" ? "/" : dir + "/"; }

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

class MemoryWritableFile : public WritableFile {
 public:
  MemoryWritableFile(std::string path, std::shared_ptr<MemoryBackend::Inode> inode)
      : path_(std::move(path)), inode_(std::move(inode)) {}

  absl::Status WriteAt(uint64_t offset, const void* data, size_t length) override {
    if (inode_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("write ", path_, ": file is closed"));
    }
    if (offset > kMaxFileSize || length > kMaxFileSize - offset) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "write %s at offset %d: %d bytes would pass the memory backend's file size limit", path_,
          offset, length));
    }
    if (length == 0) return absl::OkStatus();
    absl::MutexLock lock(&inode_->mu);
    std::string& bytes = inode_->data;
    if (bytes.size() < offset + length) bytes.resize(offset + length, '\0');
    std::memcpy(bytes.data() + offset, data, length);
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (inode_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("sync ", path_, ": file is closed"));
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    inode_.reset();
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  std::shared_ptr<MemoryBackend::Inode> inode_;  // null once closed
};

class MemoryReadableFile : public ReadableFile {
 public:
  MemoryReadableFile(std::string path, std::shared_ptr<MemoryBackend::Inode> inode)
      : path_(std::move(path)), inode_(std::move(inode)) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset, void* dst, size_t length) override {
    absl::MutexLock lock(&inode_->mu);
    // inode_->data by name each time: the analysis cannot see through a
    // reference taken under the lock.
    if (offset >= inode_->data.size()) return size_t{0};
    const size_t n = std::min<uint64_t>(length, inode_->data.size() - offset);
    if (n > 0) std::memcpy(dst, inode_->data.data() + offset, n);
    return n;
  }

  // Overridden only so the error names the file.
  absl::Status ReadBatch(absl::Span<const IoOp> ops) override {
    for (const IoOp& op : ops) {
      absl::StatusOr<size_t> n = ReadAt(op.offset, op.buffer, op.length);
      if (!n.ok()) return n.status();
      if (*n != op.length) {
        return absl::DataLossError(
            absl::StrFormat("short read %s at offset %d: wanted %d bytes, the file ends after %d",
                            path_, op.offset, op.length, *n));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() override {
    absl::MutexLock lock(&inode_->mu);
    return inode_->data.size();
  }

 private:
  const std::string path_;
  const std::shared_ptr<MemoryBackend::Inode> inode_;
};

}  // namespace

MemoryBackend::MemoryBackend() { dirs_.insert("/"); }
MemoryBackend::~MemoryBackend() = default;

bool MemoryBackend::IsDirLocked(const std::string& p) const { return dirs_.count(p) > 0; }
bool MemoryBackend::IsFileLocked(const std::string& p) const { return files_.count(p) > 0; }

bool MemoryBackend::HasChildrenLocked(const std::string& dir) const {
  const std::string prefix = ChildPrefix(dir);
  auto f = files_.lower_bound(prefix);
  if (f != files_.end() && StartsWith(f->first, prefix)) return true;
  auto d = dirs_.upper_bound(dir);
  return d != dirs_.end() && StartsWith(*d, prefix);
}

void MemoryBackend::RemoveTreeLocked(const std::string& p) {
  files_.erase(p);
  const std::string prefix = ChildPrefix(p);
  for (auto it = files_.lower_bound(prefix); it != files_.end() && StartsWith(it->first, prefix);)
    it = files_.erase(it);
  for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && StartsWith(*it, prefix);)
    it = dirs_.erase(it);
  if (p != "/") dirs_.erase(p);
}

absl::StatusOr<std::unique_ptr<WritableFile>> MemoryBackend::NewWritableFile(
    const std::string& path) {
  const std::string p = Normalize(path);
  std::shared_ptr<Inode> inode;
  {
    absl::MutexLock lock(&mu_);
    if (IsDirLocked(p)) return ErrnoStatus(EISDIR, absl::StrCat("open ", path));
    const std::string parent = Parent(p);
    if (!IsDirLocked(parent)) {
      return ErrnoStatus(IsFileLocked(parent) ? ENOTDIR : ENOENT, absl::StrCat("open ", path));
    }
    std::shared_ptr<Inode>& slot = files_[p];
    if (slot == nullptr) slot = std::make_shared<Inode>();
    inode = slot;
  }
  // Truncate the existing inode, as O_TRUNC does: open readers see it empty.
  {
    absl::MutexLock lock(&inode->mu);
    inode->data.clear();
  }
  return std::make_unique<MemoryWritableFile>(path, std::move(inode));
}

absl::StatusOr<std::unique_ptr<ReadableFile>> MemoryBackend::NewReadableFile(
    const std::string& path) {
  const std::string p = Normalize(path);
  absl::MutexLock lock(&mu_);
  if (IsDirLocked(p)) return ErrnoStatus(EISDIR, absl::StrCat("open ", path));
  auto it = files_.find(p);
  if (it == files_.end()) return ErrnoStatus(ENOENT, absl::StrCat("open ", path));
  return std::make_unique<MemoryReadableFile>(path, it->second);
}

absl::Status MemoryBackend::CreateDirs(const std::string& path) {
  const std::string p = Normalize(path);
  absl::MutexLock lock(&mu_);
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(p, '/', absl::SkipEmpty())) {
    absl::StrAppend(&prefix, "/", part);
    if (IsFileLocked(prefix)) {
      return ErrnoStatus(prefix == p ? EEXIST : ENOTDIR, absl::StrCat("mkdir ", prefix));
    }
    dirs_.insert(prefix);
  }
  return absl::OkStatus();
}

absl::Status MemoryBackend::SyncDir(const std::string& path) {
  const std::string p = Normalize(path);
  absl::ReaderMutexLock lock(&mu_);
  if (IsDirLocked(p)) return absl::OkStatus();
  return ErrnoStatus(IsFileLocked(p) ? ENOTDIR : ENOENT, absl::StrCat("open directory ", path));
}

absl::Status MemoryBackend::Rename(const std::string& from, const std::string& to) {
  const std::string f = Normalize(from);
  const std::string t = Normalize(to);
  const std::string context = absl::StrCat("rename ", from, " to ", to);
  absl::MutexLock lock(&mu_);
  const bool from_is_file = IsFileLocked(f);
  if (!from_is_file && !IsDirLocked(f)) return ErrnoStatus(ENOENT, context);
  if (f == t) return absl::OkStatus();
  if (f == "/" || StartsWith(t, ChildPrefix(f))) return ErrnoStatus(EINVAL, context);
  if (!IsDirLocked(Parent(t))) return ErrnoStatus(ENOENT, context);

  if (from_is_file) {
    if (IsDirLocked(t)) return ErrnoStatus(EISDIR, context);
    files_[t] = std::move(files_[f]);
    files_.erase(f);
    return absl::OkStatus();
  }
  if (IsFileLocked(t)) return ErrnoStatus(ENOTDIR, context);
  if (IsDirLocked(t)) {
    if (HasChildrenLocked(t)) return ErrnoStatus(ENOTEMPTY, context);
    dirs_.erase(t);
  }
  // Move the subtree: collect first, the maps cannot be re-keyed in place.
  const std::string prefix = ChildPrefix(f);
  std::vector<std::pair<std::string, std::shared_ptr<Inode>>> moved_files;
  for (auto it = files_.lower_bound(prefix); it != files_.end() && StartsWith(it->first, prefix);) {
    moved_files.emplace_back(t + it->first.substr(f.size()), std::move(it->second));
    it = files_.erase(it);
  }
  std::vector<std::string> moved_dirs;
  for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && StartsWith(*it, prefix);) {
    moved_dirs.push_back(t + it->substr(f.size()));
    it = dirs_.erase(it);
  }
  dirs_.erase(f);
  dirs_.insert(t);
  for (auto& d : moved_dirs) dirs_.insert(std::move(d));
  for (auto& [name, inode] : moved_files) files_[name] = std::move(inode);
  return absl::OkStatus();
}

absl::Status MemoryBackend::RemoveAll(const std::string& path) {
  const std::string p = Normalize(path);
  absl::MutexLock lock(&mu_);
  RemoveTreeLocked(p);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MemoryBackend::ListDir(const std::string& path) {
  const std::string p = Normalize(path);
  absl::ReaderMutexLock lock(&mu_);
  if (!IsDirLocked(p)) {
    return ErrnoStatus(IsFileLocked(p) ? ENOTDIR : ENOENT, absl::StrCat("list directory ", path));
  }
  const std::string prefix = ChildPrefix(p);
  std::vector<std::string> names;
  auto direct_child = [&](const std::string& key) {
    const std::string rest = key.substr(prefix.size());
    if (rest.find('/') == std::string::npos) names.push_back(rest);
  };
  for (auto it = files_.lower_bound(prefix); it != files_.end() && StartsWith(it->first, prefix);
       ++it)
    direct_child(it->first);
  for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && StartsWith(*it, prefix); ++it) {
    if (*it != p) direct_child(*it);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<bool> MemoryBackend::Exists(const std::string& path) {
  const std::string p = Normalize(path);
  absl::ReaderMutexLock lock(&mu_);
  return IsFileLocked(p) || IsDirLocked(p);
}

}  // namespace ckpt::storage
