#include "tests/support/local_user.h"

#include <pwd.h>

#include "absl/strings/str_cat.h"
#include "tests/catch.h"

namespace ckpt::testing {

LocalUser::LocalUser(const std::string& name, const std::string& group)
    : name_(name), group_(group) {
  if (!group_.empty()) {
    RunCommand({"/usr/sbin/groupdel", group_});
    REQUIRE(RunCommand({"/usr/sbin/groupadd", group_}).ok());
  }
  RunCommand({"/usr/sbin/userdel", name_});  // left by a killed run
  std::vector<std::string> add = {"/usr/sbin/useradd", "--no-create-home", "--shell",
                                  "/usr/sbin/nologin"};
  if (!group_.empty()) add.insert(add.end(), {"-G", group_});
  add.push_back(name_);
  const ExitInfo made = RunCommand(add);
  INFO(made.output);
  REQUIRE(made.ok());
  passwd* entry = getpwnam(name_.c_str());
  REQUIRE(entry != nullptr);
  uid_ = entry->pw_uid;
  gid_ = entry->pw_gid;
}

LocalUser::~LocalUser() {
  RunCommand({"/usr/sbin/userdel", name_});
  if (!group_.empty()) RunCommand({"/usr/sbin/groupdel", group_});
}

std::vector<std::string> LocalUser::As(const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {"/usr/bin/setpriv", absl::StrCat("--reuid=", uid_),
                                   absl::StrCat("--regid=", gid_), "--init-groups"};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

}  // namespace ckpt::testing
