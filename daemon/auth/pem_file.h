// A PEM file named by a flag (a certificate, key or CA), read with a bound:
// these are small, and a flag pointing at something huge or not PEM gets an
// error naming the flag.
#ifndef CKPT_DAEMON_AUTH_PEM_FILE_H_
#define CKPT_DAEMON_AUTH_PEM_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace ckpt::auth {

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* flag);

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_PEM_FILE_H_
