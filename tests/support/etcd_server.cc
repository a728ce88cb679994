#include "tests/support/etcd_server.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/support/http_get.h"

namespace ckpt::testing {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";

}  // namespace

TestEtcd::~TestEtcd() {
  members_.clear();  // Subprocess kills and reaps
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

absl::Status TestEtcd::Start(int members) {
  char tmpl[] = "/tmp/ckpt-etcd-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp for etcd");
  dir_ = tmpl;
  members_.resize(members);
  for (Member& m : members_) {
    m.client = FreeTcpPort();
    m.peer = FreeTcpPort();
    if (m.client == 0 || m.peer == 0 || m.client == m.peer) {
      return absl::UnavailableError("no free ports for etcd");
    }
  }
  for (int i = 0; i < members; ++i) {
    if (absl::Status s = Launch(i, true); !s.ok()) return s;
  }
  for (int i = 0; i < members; ++i) {
    if (!members_[i].process->WaitForOutput("ready to serve client requests", absl::Seconds(30))) {
      return absl::UnavailableError(
          absl::StrCat("etcd member ", i, " did not start:\n", members_[i].process->Output()));
    }
  }
  return absl::OkStatus();
}

absl::Status TestEtcd::Launch(int i, bool initial) {
  std::vector<std::string> cluster;
  for (size_t j = 0; j < members_.size(); ++j) {
    cluster.push_back(absl::StrCat("m", j, "=http://127.0.0.1:", members_[j].peer));
  }
  const std::string client = absl::StrCat("http://127.0.0.1:", members_[i].client);
  const std::string peer = absl::StrCat("http://127.0.0.1:", members_[i].peer);
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start({
      kEtcd,
      absl::StrCat("--name=m", i),
      absl::StrCat("--data-dir=", dir_, "/m", i),
      "--listen-client-urls=" + client,
      "--advertise-client-urls=" + client,
      "--listen-peer-urls=" + peer,
      "--initial-advertise-peer-urls=" + peer,
      "--initial-cluster=" + absl::StrJoin(cluster, ","),
      std::string("--initial-cluster-state=") + (initial ? "new" : "existing"),
      "--initial-cluster-token=ckpt-test",
      // Fast elections on loopback: a member lost is noticed in a second.
      "--heartbeat-interval=100",
      "--election-timeout=1000",
  });
  if (!p.ok()) return p.status();
  members_[i].process = std::move(*p);
  return absl::OkStatus();
}

std::string TestEtcd::endpoints() const {
  std::vector<std::string> out;
  for (int i = 0; i < members(); ++i) out.push_back(endpoint(i));
  return absl::StrJoin(out, ",");
}

void TestEtcd::Kill(int i) {
  if (members_[i].process != nullptr) {
    members_[i].process->Signal(SIGKILL);
    members_[i].process->Wait();
  }
}

absl::Status TestEtcd::Restart(int i) {
  Kill(i);
  if (absl::Status s = Launch(i, false); !s.ok()) return s;
  if (!members_[i].process->WaitForOutput("ready to serve client requests", absl::Seconds(30))) {
    return absl::UnavailableError(
        absl::StrCat("etcd member ", i, " did not restart:\n", members_[i].process->Output()));
  }
  return absl::OkStatus();
}

void TestEtcd::Pause(int i) { members_[i].process->Signal(SIGSTOP); }
void TestEtcd::Resume(int i) { members_[i].process->Signal(SIGCONT); }
std::string TestEtcd::Output(int i) const { return members_[i].process->Output(); }

}  // namespace ckpt::testing
