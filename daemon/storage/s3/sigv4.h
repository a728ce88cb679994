// AWS Signature Version 4 for the S3 backend (issue 32): the Authorization
// header of a request, from its method, path, query, headers and payload
// hash. Debian has no C++ S3 library that signs with V4 (libs3 2.0 predates
// it), so this is ours: small, and checked against AWS's published test
// suite and S3's own examples (tests/unit/daemon/storage/sigv4_test.cc).
//
// The secret key is used only to derive the signing key; nothing returned
// here contains it.
#ifndef CKPT_DAEMON_STORAGE_S3_SIGV4_H_
#define CKPT_DAEMON_STORAGE_S3_SIGV4_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ckpt::storage::s3 {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials' (x-amz-security-token); may be empty
};

struct Scope {
  std::string region;  // "us-east-1"
  std::string service = "s3";
};

struct SigningRequest {
  std::string method;  // "GET", "PUT", ...
  // The URI path, not yet encoded ("/bucket/a key"): each segment is
  // encoded as S3 wants (RFC 3986 unreserved kept, '/' kept, no
  // normalization of "." or "..", which are valid in S3 keys).
  std::string path = "/";
  // Query parameters, not yet encoded; order does not matter.
  std::vector<std::pair<std::string, std::string>> query;
  // Headers to sign, names in any case; a repeated name is signed as its
  // values joined by ',' in the order given. Host must be among them.
  std::vector<std::pair<std::string, std::string>> headers;
  // Hex SHA-256 of the payload, or "UNSIGNED-PAYLOAD".
  std::string payload_sha256;
};

struct Signature {
  std::string authorization;  // the Authorization header's value
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-date"
};

// Signs `request` at time `at` (its x-amz-date header, when present, must
// say the same: AmzDate(at)).
Signature SignV4(const SigningRequest& request, const Credentials& credentials, const Scope& scope,
                 absl::Time at);

// "20150830T123600Z".
std::string AmzDate(absl::Time at);
// RFC 3986 percent-encoding of everything but A-Z a-z 0-9 - _ . ~ (and
// '/' when keep_slash), upper-case hex, as SigV4 requires.
std::string UriEncode(absl::string_view s, bool keep_slash);
// Lower-case hex SHA-256 of bytes.
std::string Sha256Hex(absl::string_view bytes);

}  // namespace ckpt::storage::s3

#endif  // CKPT_DAEMON_STORAGE_S3_SIGV4_H_
