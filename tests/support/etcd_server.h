// A real etcd for the tests (Debian's etcd-server): one or three members
// on loopback, each a child process with its own data directory under a
// temporary directory, killable, pausable and restartable one by one.
#ifndef CKPT_TESTS_SUPPORT_ETCD_SERVER_H_
#define CKPT_TESTS_SUPPORT_ETCD_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tests/support/subprocess.h"

namespace ckpt::testing {

class TestEtcd {
 public:
  ~TestEtcd();  // kills the members, removes the directory
  // Starts `members` members and waits until they serve (30 s at most).
  absl::Status Start(int members = 1);
  // "127.0.0.1:P,127.0.0.1:Q,..." as --etcd_endpoints takes it.
  std::string endpoints() const;
  std::string endpoint(int i) const { return "127.0.0.1:" + std::to_string(members_[i].client); }
  int members() const { return static_cast<int>(members_.size()); }
  void Kill(int i);
  // Starts member i again (after Kill) on its ports and data.
  absl::Status Restart(int i);
  void Pause(int i);   // SIGSTOP
  void Resume(int i);  // SIGCONT
  std::string Output(int i) const;

 private:
  struct Member {
    int client = 0;
    int peer = 0;
    std::unique_ptr<Subprocess> process;
  };
  absl::Status Launch(int i, bool initial);
  std::string dir_;
  std::vector<Member> members_;
};

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_ETCD_SERVER_H_
