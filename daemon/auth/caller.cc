#include "daemon/auth/caller.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "proto/lib/status_context.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59  // Linux 4.13; older C library headers lack the name
#endif

namespace ckpt::auth {
namespace {

constexpr char kFdPeerPrefix[] = "fd:";
constexpr size_t kMaxGroups = 65536;

// Supplementary groups of the process on the other end of Unix socket
// `fd`, as the kernel recorded them when it connected (SO_PEERGROUPS), like
// SO_PEERCRED's uid and gid. Never from /proc/<pid>: the connecting process
// may be gone and its pid another's, whose groups it would borrow. A socket
// that cannot say leaves the primary group alone, which can only deny.
std::vector<gid_t> PeerGroups(int fd) {
  std::vector<gid_t> groups(64);
  socklen_t length = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length) != 0) {
    if (errno != ERANGE || length > kMaxGroups * sizeof(gid_t)) return {};
    groups.resize(length / sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length) != 0) return {};
  }
  groups.resize(length / sizeof(gid_t));
  return groups;
}

}  // namespace

Permissions Authenticator::OfLocalPeer(int fd, uid_t uid, gid_t gid) const {
  LocalUser user{uid, gid, {}};
  Permissions held = policy_.Of(user);
  if (!(held == Permissions::All()) && policy_.NamesGroups()) {
    user.groups = PeerGroups(fd);
    held = policy_.Of(user);
  }
  return held;
}

absl::StatusOr<Caller> Authenticator::Identify(const grpc::ServerContextBase& context) const {
  Caller caller;
  const std::string peer = context.peer();
  absl::string_view fd_text(peer);
  if (absl::ConsumePrefix(&fd_text, kFdPeerPrefix)) {
    int fd = -1;
    ucred cred{};
    socklen_t length = sizeof(cred);
    if (!absl::SimpleAtoi(fd_text, &fd) ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0 || length != sizeof(cred)) {
      // UNAUTHENTICATED whatever the errno: the caller is refused, not failed.
      const int error = errno;
      return absl::UnauthenticatedError(
          absl::StrCat("ckptd cannot tell who is calling on ", peer, ": ", ErrnoMessage(error)));
    }
    caller.local = true;
    caller.pid = cred.pid;
    caller.user.uid = cred.uid;
    caller.user.gid = cred.gid;
    caller.principal = Principal::LocalUser(cred.uid);
    // Every call of a rank's save and load comes through here: /proc is
    // read only when a supplementary group could still grant more.
    caller.permissions = OfLocalPeer(fd, cred.uid, cred.gid);
    caller.peer = absl::StrCat(DescribeUid(cred.uid), ", pid ", cred.pid);
    return caller;
  }
  // TCP. The TLS listener's processor already refused calls without a
  // valid token; a plaintext listener (loopback only) has no processor, so
  // both are checked here for every call.
  caller.peer = peer;
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  bool tls = false;
  if (auth != nullptr) {
    for (const grpc::string_ref& type : auth->FindPropertyValues("transport_security_type")) {
      if (type == "ssl") tls = true;
    }
  }
  if (!tls) {
    return absl::UnauthenticatedError(
        absl::StrCat("ckptd refuses TCP calls without TLS (from ", peer,
                     "); start it with --tls_cert_file, --tls_key_file and --token_file, or use "
                     "the Unix socket"));
  }
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorizationKey);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        absl::StrCat("a TCP call from ", peer, " carries no bearer token"));
  }
  std::optional<TokenGrant> grant =
      tokens_.Check(absl::string_view(it->second.data(), it->second.size()));
  if (!grant.has_value()) {
    return absl::UnauthenticatedError(absl::StrCat("ckptd refused the bearer token of ", peer));
  }
  caller.principal = Principal::Named(grant->principal);
  caller.permissions = grant->permissions;
  caller.peer = absl::StrCat(caller.principal.Describe(), " from ", peer);
  return caller;
}

absl::StatusOr<Caller> Authenticator::Authorize(const grpc::ServerContextBase& context,
                                                Permission needed) const {
  absl::StatusOr<Caller> caller = Identify(context);
  if (!caller.ok()) return caller.status();
  const bool held =
      needed == Permission::kNone ? !caller->permissions.empty() : caller->permissions.Has(needed);
  if (!held) {
    return absl::PermissionDeniedError(absl::StrCat(
        caller->peer, " may not ",
        needed == Permission::kNone ? std::string("use ckptd")
                                    : absl::StrCat("do this: it needs ", PermissionName(needed)),
        " and holds ", caller->permissions.Describe(),
        caller->local ? absl::StrCat("; ckptd admits ", policy_.Describe())
                      : std::string(" (its line in the tokens file)")));
  }
  return caller;
}

}  // namespace ckpt::auth
