#include "proto/lib/status_context.h"

#include <cerrno>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace ckpt {

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  // Payloads carry what callers act on (coordinator/commit.h): kept.
  status.ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

std::string QuoteId(absl::string_view id) {
  constexpr size_t kQuoted = 128;
  if (id.size() <= kQuoted) return std::string(id);
  return absl::StrCat(id.substr(0, kQuoted), "... (", id.size(), " bytes)");
}

absl::StatusCode ErrnoToCode(int err) {
  switch (err) {
    case 0:
      return absl::StatusCode::kOk;
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return absl::StatusCode::kResourceExhausted;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case ENOTDIR:
    case EISDIR:
    case ENOTEMPTY:
    case EBUSY:
      return absl::StatusCode::kFailedPrecondition;
    case EINVAL:
    case ENAMETOOLONG:
      return absl::StatusCode::kInvalidArgument;
    case EBADF:
      return absl::StatusCode::kInternal;
    default:
      return absl::StatusCode::kUnknown;
  }
}

absl::Status ErrnoStatus(int err, absl::string_view context) {
  return absl::Status(ErrnoToCode(err), absl::StrCat(context, ": ", ErrnoMessage(err)));
}

std::string ErrnoMessage(int err) {
  // Thread-safe (strerror_r underneath), unlike strerror's shared buffer.
  return std::generic_category().message(err);
}

}  // namespace ckpt
