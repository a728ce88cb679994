#include "daemon/auth/access_policy.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ckpt::auth {
namespace {

// A numeric id is taken as is (the account may not exist on this host
// yet, as in containers); a name must resolve.
absl::StatusOr<uid_t> ResolveUser(const std::string& name, const char* flag) {
  uint32_t id = 0;
  if (absl::SimpleAtoi(name, &id)) return static_cast<uid_t>(id);
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": no user named '", name, "'"));
  }
  return found->pw_uid;
}

absl::StatusOr<gid_t> ResolveGroup(const std::string& name, const char* flag) {
  uint32_t id = 0;
  if (absl::SimpleAtoi(name, &id)) return static_cast<gid_t>(id);
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(65536);
  if (getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": no group named '", name, "'"));
  }
  return found->gr_gid;
}

}  // namespace

absl::StatusOr<Permissions> Permissions::Parse(absl::string_view text) {
  Permissions out;
  for (absl::string_view word : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    if (word == "use") {
      out.Add(Permission::kUse);
    } else if (word == "read") {
      out.Add(Permission::kRead);
    } else if (word == "admin") {
      out.Add(Permission::kAdmin);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown permission '", word.substr(0, 40), "' (want use, read or admin)"));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("no permission given (use, read, admin)");
  return out;
}

std::string Permissions::Describe() const {
  std::vector<std::string> words;
  if (Has(Permission::kUse)) words.push_back("use");
  if (Has(Permission::kRead)) words.push_back("read");
  if (Has(Permission::kAdmin)) words.push_back("admin");
  return words.empty() ? "none" : absl::StrJoin(words, ",");
}

const char* PermissionName(Permission p) {
  switch (p) {
    case Permission::kNone:
      return "none";
    case Permission::kUse:
      return "use (attach, save and load its own jobs)";
    case Permission::kRead:
      return "read (status, list, inspect, verify)";
    case Permission::kAdmin:
      return "admin (cancel, gc, adopt)";
  }
  return "?";
}

absl::StatusOr<AccessPolicy> AccessPolicy::Create(const AccessLists& lists, uid_t daemon_uid) {
  AccessPolicy policy;
  policy.daemon_uid_ = daemon_uid;
  struct Source {
    const std::vector<std::string>& users;
    const std::vector<std::string>& groups;
    const char* user_flag;
    const char* group_flag;
    Ids* ids;
  };
  const Source sources[] = {
      {lists.use_users, lists.use_groups, "--allow_users", "--allow_groups", &policy.use_},
      {lists.read_users, lists.read_groups, "--read_users", "--read_groups", &policy.read_},
      {lists.admin_users, lists.admin_groups, "--admin_users", "--admin_groups", &policy.admin_},
  };
  std::vector<std::string> parts;
  for (const Source& s : sources) {
    for (const std::string& name : s.users) {
      absl::StatusOr<uid_t> uid = ResolveUser(name, s.user_flag);
      if (!uid.ok()) return uid.status();
      s.ids->users.insert(*uid);
    }
    for (const std::string& name : s.groups) {
      absl::StatusOr<gid_t> gid = ResolveGroup(name, s.group_flag);
      if (!gid.ok()) return gid.status();
      s.ids->groups.insert(*gid);
    }
    if (!s.users.empty())
      parts.push_back(absl::StrCat(s.user_flag, "=", absl::StrJoin(s.users, ",")));
    if (!s.groups.empty())
      parts.push_back(absl::StrCat(s.group_flag, "=", absl::StrJoin(s.groups, ",")));
  }
  policy.description_ =
      parts.empty() ? std::string("only the daemon's own user and root")
                    : absl::StrCat("the daemon's own user, root, ", absl::StrJoin(parts, " "));
  return policy;
}

bool AccessPolicy::Matches(const Ids& ids, const LocalUser& user) {
  if (ids.users.count(user.uid) > 0 || ids.groups.count(user.gid) > 0) return true;
  return std::any_of(user.groups.begin(), user.groups.end(),
                     [&](gid_t g) { return ids.groups.count(g) > 0; });
}

Permissions AccessPolicy::Of(const LocalUser& user) const {
  if (user.uid == 0 || user.uid == daemon_uid_) return Permissions::All();
  Permissions held;
  if (Matches(admin_, user)) held.Add(Permission::kAdmin);
  if (Matches(read_, user)) held.Add(Permission::kRead);
  if (Matches(use_, user)) held.Add(Permission::kUse);
  return held;
}

std::optional<gid_t> AccessPolicy::SoleGroup() const {
  std::set<gid_t> groups;
  for (const Ids* ids : {&use_, &read_, &admin_}) {
    for (uid_t uid : ids->users) {
      if (uid != daemon_uid_ && uid != 0) return std::nullopt;
    }
    groups.insert(ids->groups.begin(), ids->groups.end());
  }
  if (groups.size() != 1) return std::nullopt;
  return *groups.begin();
}

bool AccessPolicy::AdmitsOthers() const {
  for (const Ids* ids : {&use_, &read_, &admin_}) {
    for (uid_t uid : ids->users) {
      if (uid != daemon_uid_) return true;
    }
    if (!ids->groups.empty()) return true;
  }
  return false;
}

std::string AccessPolicy::Describe() const { return description_; }

}  // namespace ckpt::auth
