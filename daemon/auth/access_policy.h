// Who may do what with ckptd: the pure decision, from a caller's identity
// and the operator's flags. No I/O here; Caller identification lives in
// caller.h and job ownership in job_owners.h.
//
// Three permissions, each exactly what it names (a read-only operator may
// not attach, a user may not read others' jobs):
//  - kUse: attach ranks, save and load the jobs its principal owns;
//  - kRead: status, list, inspect and verify every job (operators);
//  - kAdmin: cancel saves, collect garbage and adopt every job (it brings
//    kRead along: an operator sees what it acts on).
// The daemon's own uid and root hold all three. Everyone else holds what
// the allow-lists give them, and nothing otherwise.
//
// Thread-safety: immutable after construction.
#ifndef CKPT_DAEMON_AUTH_ACCESS_POLICY_H_
#define CKPT_DAEMON_AUTH_ACCESS_POLICY_H_

#include <sys/types.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckpt::auth {

enum class Permission : uint8_t { kNone = 0, kUse = 1, kRead = 2, kAdmin = 4 };

const char* PermissionName(Permission p);

// A set of permissions.
class Permissions {
 public:
  Permissions() = default;
  static Permissions All() { return Permissions(7); }
  // "use", "read", "admin", comma-separated: INVALID_ARGUMENT naming the
  // word it does not know.
  static absl::StatusOr<Permissions> Parse(absl::string_view text);

  bool Has(Permission p) const { return (bits_ & static_cast<uint8_t>(p)) != 0; }
  bool empty() const { return bits_ == 0; }
  Permissions& Add(Permission p) {
    bits_ |= static_cast<uint8_t>(p);
    if (p == Permission::kAdmin) bits_ |= static_cast<uint8_t>(Permission::kRead);
    return *this;
  }
  Permissions& Add(Permissions other) {
    bits_ |= other.bits_;
    return *this;
  }
  // "use,read" or "none".
  std::string Describe() const;
  bool operator==(Permissions o) const { return bits_ == o.bits_; }

 private:
  explicit Permissions(uint8_t bits) : bits_(bits) {}
  uint8_t bits_ = 0;
};

// A local user, as the kernel reported it for the connection.
struct LocalUser {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (may include gid)
};

// The lists as given by the flags: user and group names or numeric ids.
struct AccessLists {
  std::vector<std::string> use_users, use_groups;
  std::vector<std::string> read_users, read_groups;
  std::vector<std::string> admin_users, admin_groups;
};

class AccessPolicy {
 public:
  // Resolves names to ids now (an unknown name is an error naming it and
  // the flag), so a typo stops the daemon at start-up, not a user later.
  static absl::StatusOr<AccessPolicy> Create(const AccessLists& lists, uid_t daemon_uid);

  // What the user holds.
  Permissions Of(const LocalUser& user) const;
  // Whether the user holds anything: the Unix socket closes others'
  // connections at accept, before gRPC reads a byte of them.
  bool Admits(const LocalUser& user) const { return !Of(user).empty(); }
  // True when any list names someone besides the daemon's own user: the
  // socket must then be open to others (the kernel's check on the socket
  // file would refuse them before ours could).
  bool AdmitsOthers() const;
  // The one group every other user is admitted through, when the lists
  // name exactly one group and no users: the sockets are then opened to
  // that group only (0660), not to everyone.
  std::optional<gid_t> SoleGroup() const;
  // True when any list names a group (supplementary groups then matter).
  bool NamesGroups() const {
    return !use_.groups.empty() || !read_.groups.empty() || !admin_.groups.empty();
  }
  // "users a,b; groups c" for messages and the start-up line.
  std::string Describe() const;

 private:
  struct Ids {
    std::set<uid_t> users;
    std::set<gid_t> groups;
  };
  static bool Matches(const Ids& ids, const LocalUser& user);

  uid_t daemon_uid_ = 0;
  Ids use_, read_, admin_;
  std::string description_;
};

}  // namespace ckpt::auth

#endif  // CKPT_DAEMON_AUTH_ACCESS_POLICY_H_
