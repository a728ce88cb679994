// Who owns jobs and is counted against limits: a local user (by uid, as the
// kernel reports it on the Unix socket) or a named principal (a TCP bearer
// token's name, from the tokens file). The two never meet: a token acts as
// its principal, never as the daemon's own uid, so no credential inherits
// what another owns by accident.
//
// A principal's key ("uid 1001", "principal ops") is what a job's OWNER
// record holds and what limits are counted by.
//
// Thread-safety: a value type.
#ifndef CKPT_DAEMON_AUTH_PRINCIPAL_H_
#define CKPT_DAEMON_AUTH_PRINCIPAL_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckpt::auth {

class Principal {
 public:
  Principal() = default;
  static Principal LocalUser(uid_t uid) { return Principal(uid, ""); }
  // `name` must pass ValidatePrincipalName.
  static Principal Named(std::string name) { return Principal(kNoUid, std::move(name)); }
  // Parses a key ("uid 1001", "principal ops"): INVALID_ARGUMENT otherwise.
  static absl::StatusOr<Principal> FromKey(absl::string_view key);
  // What an operator types for `ckptctl adopt`: "user:NAME", "user:UID",
  // "principal:NAME", or a bare user name or uid.
  static absl::StatusOr<Principal> FromOwnerSpec(absl::string_view spec);

  bool is_local_user() const { return name_.empty(); }
  // The local user's uid; kNoUid for a named principal.
  uid_t uid() const { return uid_; }
  const std::string& name() const { return name_; }
  std::string Key() const;
  // For messages: "uid 1001 (alice)" or "principal 'ops' (TCP token)".
  std::string Describe() const;

  bool operator==(const Principal& o) const { return uid_ == o.uid_ && name_ == o.name_; }
  bool operator!=(const Principal& o) const { return !(*this == o); }
  bool operator<(const Principal& o) const {
    return uid_ != o.uid_ ? uid_ < o.uid_ : name_ < o.name_;
  }

  // No account has it; a named principal can never pass a uid check.
  static constexpr uid_t kNoUid = static_cast<uid_t>(-1);

 private:
  Principal(uid_t uid, std::string name) : uid_(uid), name_(std::move(name)) {}
  uid_t uid_ = kNoUid;
  std::string name_;
};

// Names of principals: 1..64 of [A-Za-z0-9._-], not starting with '.'.
absl::Status ValidatePrincipalName(absl::string_view name);

// "uid 1001 (alice)", or "uid 1001" for an id with no account here.
std::string DescribeUid(uid_t uid);

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_PRINCIPAL_H_
