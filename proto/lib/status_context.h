// Errors with context (docs/style.md: each layer adds what it knows). Every error
// reads "<outer context>: <inner context>: <what failed>", so one line says
// what failed and where; codes are kept as the error crosses layers, and an
// errno becomes a code by one table for the daemon, the client and the tools.
//
// Add only what the inner error does not already say: a storage error names
// its operation and path, so its callers add the tensor or the step, not the
// path again.
//
// Thread-safety: pure functions.
#ifndef CKPT_PROTO_LIB_STATUS_CONTEXT_H_
#define CKPT_PROTO_LIB_STATUS_CONTEXT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ckpt {

// "<context>: <message>" with the same code; OK stays OK.
absl::Status WithContext(const absl::Status& status, absl::string_view context);

// A caller's id (a save, load or session id) as an error quotes it: ids may
// be of any length, and a status message travels in the reply's trailing
// metadata, where one past gRPC's limit (16 KiB) reaches the caller as
// "received initial metadata size exceeds limit" instead of the error.
std::string QuoteId(absl::string_view id);

// ENOENT -> NOT_FOUND; ENOSPC, EDQUOT, EFBIG, ENOMEM, EMFILE, ENFILE ->
// RESOURCE_EXHAUSTED; EACCES, EPERM, EROFS -> PERMISSION_DENIED; EEXIST ->
// ALREADY_EXISTS; ENOTDIR, EISDIR, ENOTEMPTY, EBUSY -> FAILED_PRECONDITION;
// EINVAL, ENAMETOOLONG -> INVALID_ARGUMENT; EBADF -> INTERNAL; anything else
// (EIO, ...) -> UNKNOWN. 0 -> OK.
absl::StatusCode ErrnoToCode(int err);

// "<context>: <ErrnoMessage(err)>" with ErrnoToCode(err).
absl::Status ErrnoStatus(int err, absl::string_view context);

// The C library's text for errno `err` ("No such file or directory"), for
// where no status is made (a log line, a bench's reply) or where a caller's
// contract fixes the code (a peer's DATA_LOSS, an auth refusal's
// UNAUTHENTICATED). Unlike strerror it is safe from any thread, and it is
// the one spelling of an errno here: tests/layering_test.sh refuses
// strerror elsewhere.
std::string ErrnoMessage(int err);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_STATUS_CONTEXT_H_
