// A local account made for a test with useradd (and a group of its own when
// named), removed with the object; a left-over of a killed run is replaced.
// Commands run as it through setpriv, with its supplementary groups. Needs
// root.
#ifndef CKPT_TESTS_SUPPORT_LOCAL_USER_H_
#define CKPT_TESTS_SUPPORT_LOCAL_USER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace ckpt::testing {

class LocalUser {
 public:
  // REQUIREs that the account (and group) could be made.
  explicit LocalUser(const std::string& name, const std::string& group = "");
  ~LocalUser();
  LocalUser(const LocalUser&) = delete;
  LocalUser& operator=(const LocalUser&) = delete;

  // `argv` as a command line that runs it as this user.
  std::vector<std::string> As(const std::vector<std::string>& argv) const;
  // Runs `argv` as this user and returns how it ended.
  ExitInfo Run(const std::vector<std::string>& argv) const { return RunCommand(As(argv)); }

  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

 private:
  std::string name_;
  std::string group_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_LOCAL_USER_H_
