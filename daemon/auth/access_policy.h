// Who may do what with ckptd: the pure decision, from a caller's identity
// and the operator's flags. No I/O here; Caller identification lives in
// caller.h and job ownership in job_owners.h.
//
// Three permissions, each implying the ones before it:
//  - kUse: attach ranks, save and load the jobs the caller's uid owns;
//  - kRead: status, list, inspect and verify every job (operators);
//  - kAdmin: cancel saves and collect garbage of every job.
// The daemon's own uid and root hold kAdmin. Everyone else holds what the
// allow-lists give them, and nothing otherwise.
//
// Thread-safety: immutable after construction.
#ifndef CKPT_DAEMON_AUTH_ACCESS_POLICY_H_
#define CKPT_DAEMON_AUTH_ACCESS_POLICY_H_

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt::auth {

enum class Permission { kNone = 0, kUse = 1, kRead = 2, kAdmin = 3 };

const char* PermissionName(Permission p);

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

  // The highest permission the user holds.
  Permission Of(const LocalUser& user) const;
  // True when any list names someone besides the daemon's own user: the
  // socket must then be open to others (the kernel's check on the socket
  // file would refuse them before ours could).
  bool AdmitsOthers() const;
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
