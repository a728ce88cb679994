// Where the S3 backend's credentials come from, in AWS's own order: a file
// the operator names (ckptd's flag; never the secret itself in argv), else
// the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN), else the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE, or ~/.aws/credentials), each file read for
// one profile (the given one, else AWS_PROFILE, else "default"). Files must
// be readable by their owner only and at most 1 MiB. Errors name the source
// and the profile, never a secret.
#ifndef CKPT_DAEMON_STORAGE_S3_CREDENTIALS_H_
#define CKPT_DAEMON_STORAGE_S3_CREDENTIALS_H_

#include <cstdlib>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/storage/s3/sigv4.h"

namespace ckpt::storage::s3 {

struct CredentialSources {
  std::string file;     // a credentials file named by a flag: it wins
  std::string profile;  // "": AWS_PROFILE, else "default"
  // The environment (tests give their own).
  std::function<const char*(const char*)> getenv = [](const char* name) {
    return std::getenv(name);
  };
};

struct LoadedCredentials {
  Credentials credentials;
  std::string source;  // for the log: "environment", "<path> [profile]"
};

absl::StatusOr<LoadedCredentials> LoadCredentials(const CredentialSources& sources);

// One profile's keys from the text of a credentials (or config) file:
// "[name]" or "[profile name]" sections of "key = value" lines, '#' and ';'
// comments. NOT_FOUND naming the profile when it is absent;
// INVALID_ARGUMENT when it lacks a key.
absl::StatusOr<Credentials> CredentialsFromIni(absl::string_view text, const std::string& profile,
                                               const std::string& path);

}  // namespace ckpt::storage::s3

#endif  // CKPT_DAEMON_STORAGE_S3_CREDENTIALS_H_
