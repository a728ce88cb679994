// A small client of etcd's v3 API over gRPC (the stubs come from Debian's
// etcd protos, proto/CMakeLists.txt): leases, the election service, a
// prefix read and each member's status. What coordinator failover needs
// (docs/failover.md), nothing more.
//
// Endpoints are tried in turn: a call that finds its member down, or
// without a raft leader (a member cut off from the quorum answers nothing
// useful, so every call asks etcd to refuse rather than wait: "hasleader"),
// moves to the next member and is retried there once per member. Errors
// name the endpoint and what etcd said.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_CLUSTER_ETCD_CLIENT_H_
#define CKPT_DAEMON_CLUSTER_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "etcd/etcdserverpb.grpc.pb.h"
#include "etcd/v3electionpb.grpc.pb.h"

namespace ckpt::cluster {

// A campaign's key while it stands: the election, the key that holds it
// and its creation revision (the leader's epoch: it only grows).
struct EtcdLeaderKey {
  std::string name;
  std::string key;
  int64_t revision = 0;
  int64_t lease = 0;
};

// A key of the election: its value (the candidate's address) and the
// revision that created it. The lowest revision is the leader.
struct EtcdCandidate {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t lease = 0;
};

struct EtcdMemberHealth {
  std::string endpoint;
  bool ok = false;
  std::string version;  // etcd's, when ok
  uint64_t raft_term = 0;
  bool is_raft_leader = false;
  std::string error;  // when not ok
};

// Ends a Campaign from another thread (the campaign blocks until elected).
class EtcdCancel {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class EtcdClient;
  void Attach(grpc::ClientContext* context);
  void Detach();
  mutable absl::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class EtcdClient {
 public:
  // `endpoints`: "host:port" of each member (http). Fails on none or one
  // malformed.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(std::vector<std::string> endpoints,
                                                            absl::Duration call_timeout);
  // "a:2379,b:2379" as the flags take them.
  static std::vector<std::string> ParseEndpoints(const std::string& list);

  const std::vector<std::string>& endpoints() const { return endpoints_; }

  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl);
  // The lease's remaining time; NOT_FOUND once etcd has let it expire.
  absl::StatusOr<absl::Duration> KeepAlive(int64_t lease);
  // `timeout`: each member's (0: the client's call timeout).
  absl::Status RevokeLease(int64_t lease, absl::Duration timeout = absl::ZeroDuration());

  // Waits until this campaign leads `name` (etcd's election service), or
  // `cancel` is cancelled (CANCELLED), or the lease ends. `value`: what the
  // leader proclaims (its address). A member lost meanwhile: the campaign
  // goes on at the next one (etcd keeps the key while the lease lives).
  // `timeout`: the longest wait (0: none).
  absl::StatusOr<EtcdLeaderKey> Campaign(const std::string& name, int64_t lease,
                                         const std::string& value, EtcdCancel& cancel,
                                         absl::Duration timeout = absl::ZeroDuration());
  // The current leader of `name`; nullopt when none stands. `timeout`:
  // each member's (0: the client's call timeout).
  absl::StatusOr<std::optional<EtcdCandidate>> Leader(
      const std::string& name, absl::Duration timeout = absl::ZeroDuration());
  absl::Status Resign(const EtcdLeaderKey& leader, absl::Duration timeout = absl::ZeroDuration());
  // Every campaign of `name`, leader first (by creation revision).
  absl::StatusOr<std::vector<EtcdCandidate>> Candidates(const std::string& name);
  // Each member's status, asked of that member alone.
  std::vector<EtcdMemberHealth> Health();

 private:
  struct Member {
    std::string endpoint;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Maintenance::Stub> maintenance;
    std::unique_ptr<v3electionpb::Election::Stub> election;
  };
  EtcdClient(std::vector<std::string> endpoints, absl::Duration call_timeout);
  // Runs `call` on the current member, then on each other one while the
  // answer says that member cannot serve (down, no leader, timed out).
  // `cancel`, when given, can end the call (Campaign: no deadline but
  // `timeout` when one is given).
  absl::Status OnAnyMember(const char* what,
                           const std::function<grpc::Status(Member&, grpc::ClientContext&)>& call,
                           EtcdCancel* cancel = nullptr,
                           absl::Duration timeout = absl::ZeroDuration());

  const std::vector<std::string> endpoints_;
  const absl::Duration call_timeout_;
  std::vector<Member> members_;
  std::atomic<size_t> current_{0};
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_ETCD_CLIENT_H_
