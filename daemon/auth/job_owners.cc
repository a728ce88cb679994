#include "daemon/auth/job_owners.h"

#include "absl/strings/str_cat.h"
#include "daemon/storage/layout.h"
#include "proto/lib/secure_random.h"
#include "proto/lib/status_context.h"

namespace ckpt::auth {
namespace {

constexpr size_t kMaxRecordBytes = 128;

}  // namespace

absl::StatusOr<std::optional<Principal>> JobOwners::ReadRecord(const std::string& job) {
  const std::string path = absl::StrCat(storage::JobDir(root_, job), "/", kOwnerFileName);
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file = backend_.NewReadableFile(path);
  if (absl::IsNotFound(file.status())) return std::optional<Principal>();
  if (!file.ok()) return WithContext(file.status(), "job owner record");
  char text[kMaxRecordBytes] = {};
  absl::StatusOr<size_t> n = (*file)->ReadAt(0, text, sizeof(text));
  if (!n.ok()) return WithContext(n.status(), absl::StrCat("reading ", path));
  absl::StatusOr<Principal> owner = Principal::FromKey(absl::string_view(text, *n));
  if (!owner.ok() || *n == sizeof(text)) {
    return absl::DataLossError(
        absl::StrCat(path,
                     " is damaged: want \"uid <number>\" or \"principal <name>\"; an admin may "
                     "replace it: ckptctl adopt --replace ",
                     job, " OWNER"));
  }
  return std::optional<Principal>(*owner);
}

absl::Status JobOwners::WriteRecord(const std::string& job, const Principal& who, bool replace) {
  const std::string dir = storage::JobDir(root_, job);
  const std::string path = absl::StrCat(dir, "/", kOwnerFileName);
  const std::string text = absl::StrCat(who.Key(), "\n");
  if (absl::Status s = backend_.CreateDirs(dir); !s.ok()) return WithContext(s, "job directory");
  if (!replace) {
    // Daemons of several hosts record the owner of a job spread over them
    // at once on a shared root: one create wins.
    absl::Status s = backend_.CreateFileExclusive(path, text);
    if (s.ok() || absl::IsAlreadyExists(s)) return s;
    return WithContext(s, absl::StrCat("recording the owner of job ", job, " in ", path));
  }
  // A name of its own: another host may write the record at the same time.
  const std::string tmp = absl::StrCat(path, ".tmp-", RandomHex(8));
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> file = backend_.NewWritableFile(tmp);
  if (!file.ok()) return WithContext(file.status(), "job owner record");
  absl::Status s = (*file)->WriteAt(0, text.data(), text.size());
  if (s.ok()) s = (*file)->Sync();
  if (absl::Status closed = (*file)->Close(); s.ok()) s = closed;
  if (s.ok()) s = backend_.Rename(tmp, path);
  if (!s.ok()) {
    (void)backend_.RemoveAll(tmp);
    return WithContext(s, absl::StrCat("recording the owner of job ", job, " in ", path));
  }
  if (s = backend_.SyncDir(dir); !s.ok()) {
    return WithContext(s, absl::StrCat("recording the owner of job ", job, " in ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Principal>> JobOwners::Owner(const std::string& job) {
  {
    absl::MutexLock lock(&mu_);
    auto it = owners_.find(job);
    if (it != owners_.end()) return std::optional<Principal>(it->second);
    if (auto p = pending_.find(job); p != pending_.end()) {
      return std::optional<Principal>(p->second.who);
    }
  }
  absl::StatusOr<std::optional<Principal>> owner = ReadRecord(job);
  if (owner.ok() && owner->has_value()) {
    absl::MutexLock lock(&mu_);
    owners_.emplace(job, **owner);
  }
  return owner;
}

absl::Status JobOwners::Claim(const std::string& job, const Principal& who) {
  // One claim at a time, so two principals attaching a new job at once
  // cannot both become its owner. Claims are rare (first attach of a job).
  absl::MutexLock lock(&mu_);
  std::optional<Principal> owner;
  if (auto it = owners_.find(job); it != owners_.end()) {
    owner = it->second;
  } else if (auto p = pending_.find(job); p != pending_.end()) {
    owner = p->second.who;
    if (owner == who) ++p->second.holds;
  } else {
    absl::StatusOr<std::optional<Principal>> recorded = ReadRecord(job);
    if (!recorded.ok()) return recorded.status();
    if (recorded->has_value()) {
      owner = **recorded;
      owners_.emplace(job, *owner);
    } else {
      absl::StatusOr<bool> has_data = has_data_ ? has_data_(job) : absl::StatusOr<bool>(false);
      if (!has_data.ok()) {
        return WithContext(has_data.status(), absl::StrCat("looking for job ", job, "'s data"));
      }
      if (*has_data) {
        return absl::PermissionDeniedError(
            absl::StrCat("job ", job,
                         " has data but no owner record (saved before ownership "
                         "was recorded, or its OWNER was lost): an admin must give it to its "
                         "owner first: ckptctl adopt ",
                         job, " OWNER"));
      }
      pending_.emplace(job, Pending{who, 1});
      owner = who;
    }
  }
  if (*owner != who) {
    return absl::PermissionDeniedError(
        absl::StrCat("job ", job, " belongs to ", owner->Describe(), ", not to ", who.Describe()));
  }
  return absl::OkStatus();
}

absl::Status JobOwners::Persist(const std::string& job, const Principal& who) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(job);
  if (it == pending_.end()) {
    // Recorded already (or the claim went): the record must be `who`'s.
    auto owner = owners_.find(job);
    if (owner != owners_.end() && owner->second == who) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(
        "job ", job, " is not ", who.Describe(), "'s to save: ",
        owner != owners_.end() ? absl::StrCat("it belongs to ", owner->second.Describe())
                               : std::string("its claim is gone; attach again")));
  }
  if (it->second.who != who) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job ", job, " belongs to ", it->second.who.Describe(), ", not to ", who.Describe()));
  }
  absl::Status s = WriteRecord(job, who, /*replace=*/false);
  if (absl::IsAlreadyExists(s)) {
    // Another host of the job (or an adopt) recorded it first.
    absl::StatusOr<std::optional<Principal>> recorded = ReadRecord(job);
    if (!recorded.ok()) return recorded.status();
    if (!recorded->has_value() || **recorded != who) {
      pending_.erase(job);
      if (recorded->has_value()) owners_[job] = **recorded;
      return absl::PermissionDeniedError(
          absl::StrCat("job ", job, " was recorded first as ",
                       recorded->has_value() ? (*recorded)->Describe() : std::string("nobody"),
                       "'s, not ", who.Describe(), "'s"));
    }
    s = absl::OkStatus();
  }
  if (!s.ok()) return s;
  owners_[job] = who;
  pending_.erase(job);
  return absl::OkStatus();
}

void JobOwners::Release(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(job);
  if (it != pending_.end() && --it->second.holds <= 0) pending_.erase(it);
}

absl::StatusOr<std::optional<Principal>> JobOwners::Adopt(const std::string& job,
                                                          const Principal& who, bool replace) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::optional<Principal>> previous = ReadRecord(job);
  if (!previous.ok() && !(replace && absl::IsDataLoss(previous.status()))) {
    return previous.status();
  }
  if (!previous.ok()) previous = std::optional<Principal>();  // a damaged record is replaced
  if (!previous->has_value()) {
    if (auto p = pending_.find(job); p != pending_.end()) previous = std::optional(p->second.who);
  }
  if (previous->has_value() && !replace) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job, " belongs to ", (*previous)->Describe(),
                     " already; give it to another owner with --replace"));
  }
  absl::Status s = WriteRecord(job, who, replace);
  if (absl::IsAlreadyExists(s)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job, " got an owner meanwhile; give it to another with --replace"));
  }
  if (!s.ok()) return s;
  pending_.erase(job);
  owners_[job] = who;
  return *previous;
}

}  // namespace ckpt::auth
