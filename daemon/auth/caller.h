// Who is calling: identifies the peer of a gRPC call and what it may do.
//
// Over the Unix socket the kernel says who the peer is: ckptd accepts the
// connections itself (unix_listener.h) and hands each to gRPC as a channel
// whose peer is "fd:<n>", so a handler reads SO_PEERCRED from that socket.
// Over TCP the caller must use TLS and carry a bearer token; the token
// decides the permission (bearer_token.h).
//
// Thread-safety: immutable after construction.
#ifndef CKPT_DAEMON_AUTH_CALLER_H_
#define CKPT_DAEMON_AUTH_CALLER_H_

#include <sys/types.h>

#include <string>

#include <grpcpp/server_context.h>

#include "absl/status/statusor.h"
#include "daemon/auth/access_policy.h"
#include "daemon/auth/bearer_token.h"

namespace ckpt::auth {

struct Caller {
  bool local = false;  // over the Unix socket, with `user` from the kernel
  LocalUser user;      // local callers only
  pid_t pid = 0;       // local callers only
  Permission permission = Permission::kNone;
  std::string peer;  // for messages: "uid 1001 (alice), pid 77" or the TCP address

  // A job's owner may act on it with kUse; others need `needed`.
  bool IsLocalUser(uid_t uid) const { return local && user.uid == uid; }
};

class Authenticator {
 public:
  Authenticator(AccessPolicy policy, BearerTokens tokens)
      : policy_(std::move(policy)), tokens_(std::move(tokens)) {}

  // The caller of the call behind `context`, if it holds at least `needed`:
  // UNAUTHENTICATED for a TCP call without TLS or a valid token,
  // PERMISSION_DENIED naming the user and what it lacks otherwise.
  absl::StatusOr<Caller> Authorize(const grpc::ServerContextBase& context, Permission needed) const;

  const AccessPolicy& policy() const { return policy_; }
  const BearerTokens& tokens() const { return tokens_; }

 private:
  absl::StatusOr<Caller> Identify(const grpc::ServerContextBase& context) const;

  const AccessPolicy policy_;
  const BearerTokens tokens_;
};

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_CALLER_H_
