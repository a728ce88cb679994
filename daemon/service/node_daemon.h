// ckptd's node role with the embedded coordinator: builds the storage
// backend, the pool, the writers and the gRPC servers from DaemonOptions,
// and runs until Shutdown().
//
// Thread-safety: Create/Start/Shutdown from one thread; the rest is
// internal.
#ifndef CKPT_DAEMON_SERVICE_NODE_DAEMON_H_
#define CKPT_DAEMON_SERVICE_NODE_DAEMON_H_

#include <atomic>
#include <memory>
#include <thread>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "daemon/auth/caller.h"
#include "daemon/auth/job_owners.h"
#include "daemon/auth/unix_listener.h"
#include "daemon/cluster/cluster_service.h"
#include "daemon/cluster/coordinator_client.h"
#include "daemon/cluster/coordinator_link.h"
#include "daemon/cluster/coordinator_service.h"
#include "daemon/cluster/etcd_client.h"
#include "daemon/cluster/leader_election.h"
#include "daemon/cluster/leader_watch.h"
#include "daemon/cluster/verify_rounds.h"
#include "daemon/cluster/verify_runner.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/exec/background_tasks.h"
#include "daemon/exec/writer_pool.h"
#include "daemon/metrics/metrics.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/peer/peer_receiver.h"
#include "daemon/pool/shm_pool.h"
#include "daemon/service/node_service.h"
#include "daemon/service/segment_server.h"
#include "daemon/service/service_notifier.h"
#include "daemon/service/spread_persist_service.h"
#include "daemon/session/daemon_options.h"
#include "daemon/session/rank_sessions.h"
#include "daemon/storage/backend.h"
#include "daemon/tier/early_step_check.h"
#include "gpu/device_runtime.h"
#include "gpu/ipc_mapping_cache.h"

namespace ckpt::service {

class NodeDaemon {
 public:
  // Allocates and pins the pool (failing with a clear message when it
  // cannot), removes stale partial directories, starts the writers.
  static absl::StatusOr<std::unique_ptr<NodeDaemon>> Create(session::DaemonOptions options);
  // The same with a storage backend built by the caller (decorated, say)
  // instead of the one options.storage_backend names.
  static absl::StatusOr<std::unique_ptr<NodeDaemon>> Create(
      session::DaemonOptions options, std::unique_ptr<storage::Backend> backend);
  ~NodeDaemon();

  // Listens on the Unix socket (and TCP address, if any).
  absl::Status Start();
  // Blocks until Shutdown() is called from another thread or a signal handler thread.
  void Wait();
  void Shutdown();
  const session::DaemonOptions& options() const { return options_; }
  uint64_t pool_segments() const { return pool_->Stats().segments; }
  int removed_partials() const { return removed_partials_; }
  std::string DescribeDevice() const { return gpu_->Describe(); }
  // Who may call, as the start-up line says it.
  std::string DescribeAccess() const { return access_note_; }

 private:
  explicit NodeDaemon(session::DaemonOptions options);
  // One line for systemd's STATUS=: what is attached and in flight.
  std::string StatusLine() const;
  // Fails this host's saves spread over hosts once the coordinator has
  // been silent past the heartbeat timeout (it died, or the link is cut):
  // it has declared this host lost by then, and no such save can commit.
  void CheckCoordinatorContact(absl::Time now);
  // The etcd client of --etcd_endpoints, made once.
  absl::Status ConnectEtcd();
  // etcd names another coordinator leader (or none): the link follows it,
  // and what this host had in flight with the old one fails, naming both.
  void FollowLeader(const cluster::CoordinatorLeader& before,
                    const cluster::CoordinatorLeader& now);
  // A node's memory-tier manifests for its registration, and a leader
  // learning them (RegisterHostRequest.memory_manifests).
  void AddMemoryManifests(v1::RegisterHostRequest& request);
  void AdoptMemorySteps(const v1::RegisterHostRequest& request);
  // A coordinator's term began or ended (LeaderElection's callbacks).
  void Elected(int64_t epoch);
  void Deposed(const std::string& reason);
  // ClusterStatus's election part: at most a second old.
  void DescribeElection(v1::CoordinatorElection& out);
  void DescribeElectionNow(v1::CoordinatorElection& out);

  session::DaemonOptions options_;
  std::unique_ptr<storage::Backend> backend_;
  std::unique_ptr<gpu::DeviceRuntime> gpu_;
  std::unique_ptr<gpu::IpcMappingCache> ipc_;
  std::unique_ptr<pool::ShmPool> pool_;
  bool pool_registered_ = false;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  // Durable copies of memory+durable steps spread over hosts: the gathering
  // and its service (with --coordinator and a memory tier), and this host's
  // client of it (in a cluster). Before the memory tier, whose persister
  // calls the client to its end.
  std::unique_ptr<tier::SpreadPersists> spread_persists_;
  std::unique_ptr<SpreadPersistServiceImpl> spread_service_;
  std::unique_ptr<SpreadPersistClient> spread_client_;
  // With --memory_tier_bytes; after the coordinator it persists to.
  std::unique_ptr<tier::MemoryTier> memory_tier_;
  // With the memory tier; its checks run on background_, drained first.
  std::unique_ptr<tier::EarlyStepChecks> step_checks_;
  std::unique_ptr<session::RankSessions> sessions_;
  std::unique_ptr<exec::WriterPool> writers_;
  std::unique_ptr<exec::ReaderPool> readers_;
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> commits_{0};
  std::unique_ptr<auth::Authenticator> auth_;
  std::unique_ptr<auth::JobOwners> owners_;
  std::string access_note_;
  // Before the context and the service: sessions report to it to their end.
  std::unique_ptr<metrics::Metrics> metrics_;
  std::unique_ptr<metrics::MetricsServer> metrics_server_;
  // Where saves of jobs spread over hosts meet (context_->coordinator_client):
  // the coordinator in this process, or the remote one; outlives the
  // service, whose sessions call it to their end.
  std::unique_ptr<cluster::CoordinatorClient> cluster_saves_;
  exec::BackgroundTasks background_;                          // commits waiting on other hosts
  cluster::RemoteCoordinatorClient* remote_saves_ = nullptr;  // in cluster_saves_, if remote
  std::unique_ptr<session::NodeContext> context_;
  std::unique_ptr<NodeService> service_;
  // ckptctl verify of memory-tier steps spread over hosts: the rounds at
  // the coordinator, the checks on a host (destroyed after its link).
  std::unique_ptr<cluster::VerifyRounds> verify_rounds_;
  std::unique_ptr<cluster::VerifyRunner> verify_runner_;
  std::unique_ptr<cluster::ClusterServiceImpl> cluster_;                  // with --coordinator
  std::unique_ptr<cluster::CoordinatorServiceImpl> coordinator_service_;  // with --coordinator
  std::unique_ptr<cluster::CoordinatorLink> coordinator_link_;
  // Failover through etcd (--etcd_endpoints): the client, and a
  // coordinator's candidacy or a node's view of who leads. Stopped first
  // at shutdown: a leader resigns, and the next takes over at once.
  std::unique_ptr<cluster::EtcdClient> etcd_;
  std::unique_ptr<cluster::LeaderElection> election_;
  std::unique_ptr<cluster::LeaderWatch> leader_watch_;
  // election_ once set, for the gRPC handlers and commits that ask it
  // (the server serves before the election starts).
  std::atomic<cluster::LeaderElection*> election_view_{nullptr};
  absl::Mutex election_description_mu_;
  v1::CoordinatorElection election_description_ ABSL_GUARDED_BY(election_description_mu_);
  absl::Time election_described_at_ ABSL_GUARDED_BY(election_description_mu_) =
      absl::InfinitePast();
  std::unique_ptr<peer::PeerReceiver> peer_receiver_;  // with --peer_address
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<SegmentServer> segment_server_;
  auth::UnixListener unix_listener_;  // stopped before server_ shuts down
  int removed_partials_ = 0;
  ServiceNotifier notifier_;  // READY/STATUS/WATCHDOG/STOPPING to systemd
  absl::Notification stop_;
  std::thread reaper_;
};

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_NODE_DAEMON_H_
