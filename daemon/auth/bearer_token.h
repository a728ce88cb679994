// Bearer tokens for TCP callers: read from files named by flags, compared
// in constant time (a byte-by-byte compare that stops early tells a remote
// caller, by its timing, how much of a guess was right).
//
// Two tokens may be configured: an admin token (every permission) and a
// read-only one (status, list, inspect, verify). A TCP call carries one in
// the "authorization: Bearer <token>" metadata.
//
// Thread-safety: immutable after construction.
#ifndef CKPT_DAEMON_AUTH_BEARER_TOKEN_H_
#define CKPT_DAEMON_AUTH_BEARER_TOKEN_H_

#include <string>

#include <grpcpp/security/auth_metadata_processor.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/auth/access_policy.h"

namespace ckpt::auth {

inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// The token in `path`: one line, surrounding whitespace dropped. Refuses an
// empty token, one shorter than 16 characters, and a file that users other
// than its owner can read (a secret is only as safe as its file).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const char* flag);

// Equal without revealing where two strings first differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

class BearerTokens {
 public:
  BearerTokens() = default;
  BearerTokens(std::string admin, std::string read_only)
      : admin_(std::move(admin)), read_only_(std::move(read_only)) {}

  bool configured() const { return !admin_.empty() || !read_only_.empty(); }
  // The permission `authorization` (the metadata value) grants: kNone for a
  // missing, malformed or wrong token.
  Permission Check(absl::string_view authorization) const;

 private:
  std::string admin_;
  std::string read_only_;
};

// Refuses (UNAUTHENTICATED) every call over a TLS listener that carries no
// valid token, before the request is read: a caller without the secret
// cannot make the daemon parse its messages.
class TokenAuthProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenAuthProcessor(const BearerTokens& tokens) : tokens_(tokens) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const BearerTokens& tokens_;
};

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_BEARER_TOKEN_H_
