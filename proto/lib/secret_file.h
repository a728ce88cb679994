// Reading a file that holds a secret (a bearer token, S3 credentials): a
// regular file, readable by its owner only (a secret is only as safe as its
// file), at most a bounded size. Errors name `what` (the flag or source)
// and the path, never the contents.
#ifndef CKPT_PROTO_LIB_SECRET_FILE_H_
#define CKPT_PROTO_LIB_SECRET_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace ckpt {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const char* what,
                                           size_t max_bytes);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_SECRET_FILE_H_
