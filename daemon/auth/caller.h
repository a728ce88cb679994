// Who is calling: identifies the peer of a gRPC call and what it may do.
//
// Over the Unix socket the kernel says who the peer is: ckptd accepts the
// connections itself (unix_listener.h) and hands each to gRPC as a channel
// whose peer is "fd:<n>", so a handler reads SO_PEERCRED from that socket.
// Over TCP the caller must use TLS and carry a bearer token; the token
// names the principal and its permissions (bearer_token.h). A TCP caller
// never acts as a local user (the daemon's own uid included).
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
#include "daemon/auth/principal.h"

namespace ckpt::auth {

struct Caller {
  bool local = false;  // over the Unix socket, with `user` from the kernel
  LocalUser user;      // local callers only
  pid_t pid = 0;       // local callers only
  // Who it acts as: owns the jobs it creates, is counted against limits.
  Principal principal;
  Permissions permissions;
  std::string peer;  // for messages: "uid 1001 (alice), pid 77" or the TCP address

  bool Has(Permission p) const { return permissions.Has(p); }
};

class Authenticator {
 public:
  Authenticator(AccessPolicy policy, BearerTokens tokens)
      : policy_(std::move(policy)), tokens_(std::move(tokens)) {}

  // The caller of the call behind `context`, if it holds `needed` (kNone:
  // any permission at all): UNAUTHENTICATED for a TCP call without TLS or
  // a valid token, PERMISSION_DENIED naming the caller and what it lacks
  // otherwise.
  absl::StatusOr<Caller> Authorize(const grpc::ServerContextBase& context, Permission needed) const;

  // What the local process on the other end of Unix socket `fd` holds, by
  // the credentials the kernel recorded at connect (SO_PEERCRED's uid and
  // gid; SO_PEERGROUPS when groups matter).
  Permissions OfLocalPeer(int fd, uid_t uid, gid_t gid) const;

  const AccessPolicy& policy() const { return policy_; }
  const BearerTokens& tokens() const { return tokens_; }

 private:
  absl::StatusOr<Caller> Identify(const grpc::ServerContextBase& context) const;

  const AccessPolicy policy_;
  const BearerTokens tokens_;
};

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_CALLER_H_
