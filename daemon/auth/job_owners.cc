#include "daemon/auth/job_owners.h"

#include <pwd.h>

#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "daemon/coordinator/layout.h"
#include "proto/lib/status_context.h"

namespace ckpt::auth {
namespace {

constexpr size_t kMaxRecordBytes = 64;
constexpr char kRecordPrefix[] = "uid ";

}  // namespace

std::string DescribeUid(uid_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return absl::StrCat("uid ", uid, " (", found->pw_name, ")");
  }
  return absl::StrCat("uid ", uid);
}

absl::StatusOr<std::optional<uid_t>> JobOwners::ReadRecord(const std::string& job) {
  const std::string path = absl::StrCat(coordinator::JobDir(root_, job), "/", kOwnerFileName);
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file = backend_.NewReadableFile(path);
  if (absl::IsNotFound(file.status())) return std::optional<uid_t>();
  if (!file.ok()) return WithContext(file.status(), "job owner record");
  char text[kMaxRecordBytes] = {};
  absl::StatusOr<size_t> n = (*file)->ReadAt(0, text, sizeof(text));
  if (!n.ok()) return WithContext(n.status(), absl::StrCat("reading ", path));
  absl::string_view record(text, *n);
  record = absl::StripAsciiWhitespace(record);
  uint32_t uid = 0;
  if (!absl::ConsumePrefix(&record, kRecordPrefix) || !absl::SimpleAtoi(record, &uid)) {
    return absl::DataLossError(absl::StrCat(path, " is damaged: want \"uid <number>\""));
  }
  return std::optional<uid_t>(static_cast<uid_t>(uid));
}

absl::Status JobOwners::WriteRecord(const std::string& job, uid_t uid) {
  const std::string dir = coordinator::JobDir(root_, job);
  const std::string path = absl::StrCat(dir, "/", kOwnerFileName);
  // A name of its own: daemons of several hosts record the owner of a job
  // spread over them at once on a shared root, and one's rename must not
  // take the file another is still writing.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string tmp = absl::StrCat(path, ".tmp-", absl::Hex(rng(), absl::kZeroPad16));
  const std::string text = absl::StrCat(kRecordPrefix, uid, "\n");
  if (absl::Status s = backend_.CreateDirs(dir); !s.ok()) return WithContext(s, "job directory");
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> file = backend_.NewWritableFile(tmp);
  if (!file.ok()) return WithContext(file.status(), "job owner record");
  absl::Status s = (*file)->WriteAt(0, text.data(), text.size());
  if (s.ok()) s = (*file)->Sync();
  if (absl::Status closed = (*file)->Close(); s.ok()) s = closed;
  if (s.ok()) s = backend_.Rename(tmp, path);
  if (s.ok()) s = backend_.SyncDir(dir);
  if (!s.ok())
    return WithContext(s, absl::StrCat("recording the owner of job ", job, " in ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<uid_t>> JobOwners::Owner(const std::string& job) {
  {
    absl::MutexLock lock(&mu_);
    auto it = owners_.find(job);
    if (it != owners_.end()) return std::optional<uid_t>(it->second);
    it = pending_.find(job);
    if (it != pending_.end()) return std::optional<uid_t>(it->second);
  }
  absl::StatusOr<std::optional<uid_t>> owner = ReadRecord(job);
  if (owner.ok() && owner->has_value()) {
    absl::MutexLock lock(&mu_);
    owners_.emplace(job, **owner);
  }
  return owner;
}

absl::Status JobOwners::Claim(const std::string& job, uid_t uid) {
  // One claim at a time, so two users attaching a new job at once cannot
  // both become its owner. Claims are rare (first attach of a job).
  absl::MutexLock lock(&mu_);
  std::optional<uid_t> owner;
  if (auto it = owners_.find(job); it != owners_.end()) {
    owner = it->second;
  } else if (auto p = pending_.find(job); p != pending_.end()) {
    owner = p->second;
  } else {
    absl::StatusOr<std::optional<uid_t>> recorded = ReadRecord(job);
    if (!recorded.ok()) return recorded.status();
    if (recorded->has_value()) {
      owner = **recorded;
      owners_[job] = *owner;
    } else {
      pending_[job] = uid;
      owner = uid;
    }
  }
  if (*owner != uid) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job ", job, " belongs to ", DescribeUid(*owner), ", not to ", DescribeUid(uid)));
  }
  return absl::OkStatus();
}

absl::Status JobOwners::Persist(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(job);
  if (it == pending_.end()) return absl::OkStatus();  // recorded already
  if (absl::Status s = WriteRecord(job, it->second); !s.ok()) return s;
  owners_[job] = it->second;
  pending_.erase(it);
  return absl::OkStatus();
}

void JobOwners::Forget(const std::string& job) {
  absl::MutexLock lock(&mu_);
  pending_.erase(job);
}

}  // namespace ckpt::auth
