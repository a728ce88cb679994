#include "daemon/storage/fault_injection.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/lib/status_context.h"

namespace ckpt::storage {

// What DropUnsyncedData needs of one file: its synced bytes, and what
// happened to it since (a truncating open, writes). Guarded by the
// decorator's mu_.
struct FaultInjectionBackend::TrackedFile {
  std::string synced;
  bool truncate_pending = false;
  std::vector<std::pair<uint64_t, std::string>> pending;  // offset, bytes
  // A write failed in the wrapped backend: some of it may have landed.
  bool failed_write = false;

  bool dirty() const { return truncate_pending || !pending.empty() || failed_write; }
};

namespace {

absl::Status Injected(int err, absl::string_view context) {
  const absl::Status s = ErrnoStatus(err, context);
  return absl::Status(s.code(), absl::StrCat(s.message(), " (injected fault)"));
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

namespace internal {

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionBackend* owner, std::string path,
                    std::unique_ptr<WritableFile> target,
                    std::shared_ptr<FaultInjectionBackend::TrackedFile> tracked)
      : owner_(owner),
        path_(std::move(path)),
        target_(std::move(target)),
        tracked_(std::move(tracked)) {}

  absl::Status WriteAt(uint64_t offset, const void* data, size_t length) override {
    absl::Status s = owner_->BeforeWrite(path_, offset, length);
    if (!s.ok()) return s;
    s = target_->WriteAt(offset, data, length);
    const IoOp op{offset, const_cast<void*>(data), length};
    owner_->AfterWrite(*tracked_, {&op, 1}, s.ok());
    return s;
  }

  // The ops before the first one over the write budget are written, as a
  // real disk filling up would.
  absl::Status WriteBatch(absl::Span<const IoOp> ops) override {
    size_t allowed = 0;
    absl::Status refused;
    for (; allowed < ops.size(); ++allowed) {
      const IoOp& op = ops[allowed];
      refused = owner_->BeforeWrite(path_, op.offset, op.length);
      if (!refused.ok()) break;
    }
    if (allowed == 0) return refused;
    absl::Status s = target_->WriteBatch(ops.subspan(0, allowed));
    owner_->AfterWrite(*tracked_, ops.subspan(0, allowed), s.ok());
    return s.ok() ? refused : s;
  }

  absl::Status Sync() override {
    absl::Status s = owner_->BeforeSync(path_);
    if (s.ok()) s = target_->Sync();
    if (s.ok()) owner_->AfterSync(*tracked_);
    return s;
  }

  absl::Status Close() override { return target_->Close(); }
  void Abandon() override { target_->Abandon(); }

 private:
  FaultInjectionBackend* const owner_;
  const std::string path_;
  const std::unique_ptr<WritableFile> target_;
  const std::shared_ptr<FaultInjectionBackend::TrackedFile> tracked_;
};

class FaultReadableFile : public ReadableFile {
 public:
  FaultReadableFile(FaultInjectionBackend* owner, std::string path,
                    std::unique_ptr<ReadableFile> target)
      : owner_(owner), path_(std::move(path)), target_(std::move(target)) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset, void* dst, size_t length) override {
    if (absl::Status s = owner_->BeforeRead(path_, offset); !s.ok()) return s;
    absl::StatusOr<size_t> n = target_->ReadAt(offset, dst, length);
    if (n.ok()) owner_->AfterRead(path_, offset, dst, *n);
    return n;
  }

  absl::Status ReadBatch(absl::Span<const IoOp> ops) override {
    if (!ops.empty()) {
      if (absl::Status s = owner_->BeforeRead(path_, ops[0].offset); !s.ok()) return s;
    }
    absl::Status s = target_->ReadBatch(ops);
    if (!s.ok()) return s;
    for (const IoOp& op : ops) owner_->AfterRead(path_, op.offset, op.buffer, op.length);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() override { return target_->Size(); }

 private:
  FaultInjectionBackend* const owner_;
  const std::string path_;
  const std::unique_ptr<ReadableFile> target_;
};

}  // namespace internal

FaultInjectionBackend::FaultInjectionBackend(Backend* target) : target_(target) {}
FaultInjectionBackend::FaultInjectionBackend(std::unique_ptr<Backend> target)
    : owned_(std::move(target)), target_(owned_.get()) {}
FaultInjectionBackend::~FaultInjectionBackend() = default;

void FaultInjectionBackend::FailNthSync(int n) {
  absl::MutexLock lock(&mu_);
  syncs_until_failure_ = n > 0 ? n : 0;
}

void FaultInjectionBackend::FailAllSyncs(bool on) {
  absl::MutexLock lock(&mu_);
  fail_all_syncs_ = on;
}

void FaultInjectionBackend::FailSyncDirs(bool on) {
  absl::MutexLock lock(&mu_);
  fail_sync_dirs_ = on;
}

void FaultInjectionBackend::SetWriteBudget(std::optional<uint64_t> bytes) {
  absl::MutexLock lock(&mu_);
  write_budget_ = bytes;
}

void FaultInjectionBackend::FailReads(bool on) {
  absl::MutexLock lock(&mu_);
  fail_reads_ = on;
}

void FaultInjectionBackend::CorruptReads(const std::string& path,
                                         std::optional<uint64_t> file_offset) {
  absl::MutexLock lock(&mu_);
  corrupt_[path] = file_offset;
}

void FaultInjectionBackend::ClearFaults() {
  absl::MutexLock lock(&mu_);
  syncs_until_failure_ = 0;
  fail_all_syncs_ = false;
  fail_sync_dirs_ = false;
  write_budget_.reset();
  fail_reads_ = false;
  corrupt_.clear();
}

absl::Status FaultInjectionBackend::BeforeWrite(const std::string& path, uint64_t offset,
                                                size_t length) {
  absl::MutexLock lock(&mu_);
  if (write_budget_.has_value()) {
    if (length > *write_budget_) {
      return Injected(ENOSPC, absl::StrFormat("pwrite %s at offset %d", path, offset));
    }
    *write_budget_ -= length;
  }
  return absl::OkStatus();
}

void FaultInjectionBackend::AfterWrite(TrackedFile& file, absl::Span<const IoOp> ops, bool ok) {
  absl::MutexLock lock(&mu_);
  if (!ok) {
    file.failed_write = true;
    return;
  }
  for (const IoOp& op : ops) {
    if (op.length == 0) continue;
    file.pending.emplace_back(op.offset,
                              std::string(static_cast<const char*>(op.buffer), op.length));
  }
}

absl::Status FaultInjectionBackend::BeforeSync(const std::string& path) {
  absl::MutexLock lock(&mu_);
  bool fail = fail_all_syncs_;
  if (syncs_until_failure_ > 0 && --syncs_until_failure_ == 0) fail = true;
  if (fail) return Injected(EIO, absl::StrCat("fsync ", path));
  return absl::OkStatus();
}

void FaultInjectionBackend::AfterSync(TrackedFile& file) {
  absl::MutexLock lock(&mu_);
  if (file.truncate_pending) file.synced.clear();
  for (const auto& [offset, bytes] : file.pending) {
    if (file.synced.size() < offset + bytes.size()) file.synced.resize(offset + bytes.size(), '\0');
    std::memcpy(file.synced.data() + offset, bytes.data(), bytes.size());
  }
  file.pending.clear();
  file.truncate_pending = false;
  file.failed_write = false;
}

absl::Status FaultInjectionBackend::BeforeRead(const std::string& path, uint64_t offset) {
  absl::MutexLock lock(&mu_);
  if (fail_reads_) return Injected(EIO, absl::StrFormat("pread %s at offset %d", path, offset));
  return absl::OkStatus();
}

void FaultInjectionBackend::AfterRead(const std::string& path, uint64_t offset, void* data,
                                      size_t length) {
  absl::MutexLock lock(&mu_);
  auto it = corrupt_.find(path);
  if (it == corrupt_.end() || length == 0) return;
  auto* bytes = static_cast<unsigned char*>(data);
  if (!it->second.has_value()) {
    bytes[0] ^= 1;
  } else if (*it->second >= offset && *it->second - offset < length) {
    bytes[*it->second - offset] ^= 1;
  }
}

absl::Status FaultInjectionBackend::DropUnsyncedData() {
  std::vector<std::pair<std::string, std::shared_ptr<TrackedFile>>> dirty;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [path, file] : tracked_) {
      if (file->dirty()) dirty.emplace_back(path, file);
    }
  }
  absl::Status result;
  for (const auto& [path, file] : dirty) {
    std::string synced;
    {
      absl::MutexLock lock(&mu_);
      synced = file->synced;
    }
    // Straight to the wrapped backend: restoring must not trip our faults.
    absl::StatusOr<std::unique_ptr<WritableFile>> out = target_->NewWritableFile(path);
    absl::Status s = out.status();
    if (s.ok()) s = (*out)->WriteAt(0, synced.data(), synced.size());
    if (s.ok()) s = (*out)->Sync();
    if (out.ok()) s.Update((*out)->Close());
    if (!s.ok()) {
      result.Update(WithContext(s, absl::StrCat("drop unsynced data of ", path)));
      continue;
    }
    absl::MutexLock lock(&mu_);
    file->pending.clear();
    file->truncate_pending = false;
    file->failed_write = false;
  }
  return result;
}

std::string FaultInjectionBackend::Name() const {
  return absl::StrCat("fault(", target_->Name(), ")");
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionBackend::NewWritableFile(
    const std::string& path) {
  // The bytes a crash would fall back to: the last synced ones if we wrote
  // this file before, what is on storage now if not.
  auto file = std::make_shared<TrackedFile>();
  file->truncate_pending = true;
  bool known = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = tracked_.find(path);
    if (it != tracked_.end()) {
      file->synced = it->second->synced;
      known = true;
    }
  }
  if (!known) {
    absl::StatusOr<bool> exists = target_->Exists(path);
    if (exists.ok() && *exists) {
      absl::StatusOr<std::string> old = ReadWholeFile(*target_, path);
      if (old.ok()) file->synced = *std::move(old);  // a directory: the open below fails
    }
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> target_file = target_->NewWritableFile(path);
  if (!target_file.ok()) return target_file.status();
  {
    absl::MutexLock lock(&mu_);
    tracked_[path] = file;
  }
  return std::make_unique<internal::FaultWritableFile>(this, path, *std::move(target_file),
                                                       std::move(file));
}

absl::StatusOr<std::unique_ptr<ReadableFile>> FaultInjectionBackend::NewReadableFile(
    const std::string& path) {
  absl::StatusOr<std::unique_ptr<ReadableFile>> file = target_->NewReadableFile(path);
  if (!file.ok()) return file.status();
  return std::make_unique<internal::FaultReadableFile>(this, path, *std::move(file));
}

absl::StatusOr<std::unique_ptr<ReadableFile>> FaultInjectionBackend::OpenReadOnlyBeneath(
    const std::string& dir, const std::string& name) {
  absl::StatusOr<std::unique_ptr<ReadableFile>> file = target_->OpenReadOnlyBeneath(dir, name);
  if (!file.ok()) return file.status();
  return std::make_unique<internal::FaultReadableFile>(this, absl::StrCat(dir, "/", name),
                                                       *std::move(file));
}

absl::Status FaultInjectionBackend::CreateDirs(const std::string& path) {
  return target_->CreateDirs(path);
}

absl::Status FaultInjectionBackend::SyncDir(const std::string& path) {
  {
    absl::MutexLock lock(&mu_);
    if (fail_sync_dirs_) return Injected(EIO, absl::StrCat("fsync directory ", path));
  }
  return target_->SyncDir(path);
}

absl::Status FaultInjectionBackend::RenameNoReplace(const std::string& from,
                                                    const std::string& to) {
  absl::StatusOr<bool> exists = target_->Exists(to);
  if (exists.ok() && *exists) {
    return absl::AlreadyExistsError(absl::StrCat("rename ", from, " to ", to, ": exists"));
  }
  return Rename(from, to);
}

absl::Status FaultInjectionBackend::Rename(const std::string& from, const std::string& to) {
  absl::Status s = target_->Rename(from, to);
  if (!s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (auto it = tracked_.find(from); it != tracked_.end()) {
    auto file = std::move(it->second);
    tracked_.erase(it);
    tracked_[to] = std::move(file);
  }
  const std::string prefix = from + "/";
  std::vector<std::pair<std::string, std::shared_ptr<TrackedFile>>> moved;
  for (auto it = tracked_.lower_bound(prefix);
       it != tracked_.end() && StartsWith(it->first, prefix);) {
    moved.emplace_back(to + it->first.substr(from.size()), std::move(it->second));
    it = tracked_.erase(it);
  }
  for (auto& [path, file] : moved) tracked_[path] = std::move(file);
  return absl::OkStatus();
}

absl::Status FaultInjectionBackend::RemoveAll(const std::string& path) {
  absl::Status s = target_->RemoveAll(path);
  if (!s.ok()) return s;
  absl::MutexLock lock(&mu_);
  tracked_.erase(path);
  const std::string prefix = path + "/";
  for (auto it = tracked_.lower_bound(prefix);
       it != tracked_.end() && StartsWith(it->first, prefix);)
    it = tracked_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FaultInjectionBackend::ListDir(const std::string& path) {
  return target_->ListDir(path);
}

absl::StatusOr<bool> FaultInjectionBackend::Exists(const std::string& path) {
  return target_->Exists(path);
}

}  // namespace ckpt::storage
