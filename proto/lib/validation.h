// Validation of names that arrive from callers. Names become parts of paths
// (jobs) or keys in the manifest (tensors, objects), so they are restricted
// to [A-Za-z0-9._-], may not be "." or "..", and are at most 255 bytes
// (NAME_MAX: a job name is a directory name).
#ifndef CKPT_PROTO_LIB_VALIDATION_H_
#define CKPT_PROTO_LIB_VALIDATION_H_

#include <cstddef>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace ckpt {

// `what` names the field in the error, e.g. ValidateName("job", job).
absl::Status ValidateName(absl::string_view what, absl::string_view name);

// Relative file names read from untrusted input: non-empty, at most
// kMaxConfinedNameBytes, '/'-separated components of [A-Za-z0-9._-] that are
// neither empty, "." nor "..", at most kMaxConfinedNameComponents of them.
// So the name cannot leave the directory it is resolved in.
// INVALID_ARGUMENT naming the file otherwise.
inline constexpr size_t kMaxConfinedNameBytes = 1024;
inline constexpr int kMaxConfinedNameComponents = 8;
absl::Status ValidateConfinedName(absl::string_view name);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_VALIDATION_H_
