// Bearer tokens for TCP callers: read from files named by flags, compared
// in constant time (a byte-by-byte compare that stops early tells a remote
// caller, by its timing, how much of a guess was right).
//
// Each token names a principal (principal.h) and exactly its permissions,
// from a tokens file (--tokens_file), one per line:
//
//   # name     permissions     token
//   trainer    use             4f1c...   (attach, save, load its own jobs)
//   dashboard  read            9a7e...   (status, list, inspect, verify)
//   ops        read,admin      c2d0...   (also cancel, gc, adopt)
//
// The older single-token flags still work: --token_file is principal
// "admin" (use,read,admin), --read_token_file principal "read" (read).
// A TCP call carries its token in "authorization: Bearer <token>".
//
// Thread-safety: immutable after construction.
#ifndef CKPT_DAEMON_AUTH_BEARER_TOKEN_H_
#define CKPT_DAEMON_AUTH_BEARER_TOKEN_H_

#include <optional>
#include <string>
#include <vector>

#include <grpcpp/security/auth_metadata_processor.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/auth/access_policy.h"
#include "proto/lib/constant_time.h"

namespace ckpt::auth {

inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// The token in `path`: one line, surrounding whitespace dropped. Refuses an
// empty token, one shorter than 16 characters, and a file that users other
// than its owner can read (a secret is only as safe as its file).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const char* flag);

struct TokenGrant {
  std::string principal;  // its name (principal.h)
  Permissions permissions;
};

class BearerTokens {
 public:
  BearerTokens() = default;
  // The single-token flags: principal "admin" and principal "read".
  BearerTokens(std::string admin, std::string read_only);

  // Adds the tokens of a tokens file (format above). INVALID_ARGUMENT
  // naming the flag, the file and the line for a malformed line, a name or
  // token given twice, or a file others can read.
  absl::Status AddFile(const std::string& path, const char* flag);

  bool configured() const { return !tokens_.empty(); }
  // What `authorization` (the metadata value) grants: nullopt for a
  // missing, malformed or wrong token. Every token is compared in full.
  std::optional<TokenGrant> Check(absl::string_view authorization) const;

 private:
  struct Entry {
    std::string token;
    TokenGrant grant;
  };
  absl::Status Add(std::string token, TokenGrant grant, const std::string& where);
  std::vector<Entry> tokens_;
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
