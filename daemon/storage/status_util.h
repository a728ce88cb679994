// Error helpers shared by the storage backends: every error names the
// operation and the path, and the absl code follows the errno so that callers
// can tell "missing" and "disk full" from "broken".
#ifndef CKPT_DAEMON_STORAGE_STATUS_UTIL_H_
#define CKPT_DAEMON_STORAGE_STATUS_UTIL_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace ckpt::storage {

// ENOENT -> NOT_FOUND, ENOSPC/EDQUOT -> RESOURCE_EXHAUSTED, EACCES/EPERM/EROFS
// -> PERMISSION_DENIED, EEXIST -> ALREADY_EXISTS, ENOTDIR/EISDIR/ENOTEMPTY ->
// FAILED_PRECONDITION, EINVAL -> INVALID_ARGUMENT, EBADF -> INTERNAL, anything
// else (EIO, ...) -> UNKNOWN.
absl::StatusCode ErrnoToCode(int err);

// "<context>: <strerror(err)>" with ErrnoToCode(err).
absl::Status ErrnoStatus(int err, absl::string_view context);

// Same code, message "<context>: <original message>". OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_STATUS_UTIL_H_
