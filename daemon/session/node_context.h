// What every session of a node daemon shares: its options, the GPU, the
// pool, storage, writers, the coordinator and the counters behind status.
//
// Thread-safety: a plain bundle of references; each part documents its own.
#ifndef CKPT_DAEMON_SESSION_NODE_CONTEXT_H_
#define CKPT_DAEMON_SESSION_NODE_CONTEXT_H_

#include <atomic>
#include <cstdint>

#include "ckpt/v1/common.pb.h"
#include "daemon/auth/caller.h"
#include "daemon/auth/job_owners.h"
#include "daemon/cluster/cluster_service.h"
#include "daemon/cluster/coordinator_client.h"
#include "daemon/cluster/verify_rounds.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/exec/background_tasks.h"
#include "daemon/exec/reader_pool.h"
#include "daemon/exec/writer_pool.h"
#include "daemon/metrics/metrics.h"
#include "daemon/peer/peer_receiver.h"
#include "daemon/pool/shm_pool.h"
#include "daemon/session/daemon_options.h"
#include "daemon/session/disk_reservations.h"
#include "daemon/session/rank_sessions.h"
#include "daemon/storage/backend.h"
#include "daemon/tier/early_step_check.h"
#include "daemon/tier/memory_tier.h"
#include "daemon/tier/stores.h"
#include "gpu/device_runtime.h"
#include "gpu/ipc_mapping_cache.h"

namespace ckpt::session {

struct NodeContext {
  const DaemonOptions& options;
  gpu::DeviceRuntime& gpu;
  gpu::IpcMappingCache& ipc;  // ranks' GPU allocations, by session
  v1::HostIdentity host;
  coordinator::Coordinator& coordinator;
  storage::Backend& backend;
  pool::ShmPool& pool;
  exec::WriterPool& writers;
  exec::ReaderPool& readers;
  RankSessions& sessions;
  std::atomic<uint64_t>& bytes_written;
  std::atomic<uint64_t>& bytes_read;
  std::atomic<uint64_t>& commits;
  const auth::Authenticator& auth;  // who may call, and for what
  auth::JobOwners& owners;
  metrics::Metrics& metrics;  // events and byte counters (daemon/metrics)
  // Where saves of jobs spread over hosts are planned and committed: the
  // cluster's coordinator (over gRPC, or this process when it is the
  // coordinator); null when this daemon is in no cluster. Set before the
  // daemon serves.
  cluster::CoordinatorClient* coordinator_client = nullptr;
  // Threads for commits that wait on other hosts; null: run in place.
  exec::BackgroundTasks* background = nullptr;
  // The peer data channel's receiver and the address other hosts reach it
  // at (--peer_address); null and empty without one. Set before serving.
  peer::PeerReceiver* peer = nullptr;
  std::string peer_address{};
  std::atomic<uint64_t> peer_bytes_sent{0};   // forwarded to other hosts: loads, replicas
  std::atomic<uint64_t> chunk_bytes_read{0};  // GetStatusResponse.chunk_bytes_read
  // The memory tier; null without one (--memory_tier_bytes 0). Set before
  // serving.
  tier::MemoryTier* memory_tier = nullptr;
  // Checks of held steps begun as a job's ranks attach; with memory_tier.
  tier::EarlyStepChecks* step_checks = nullptr;
  std::atomic<uint64_t> memory_bytes_read{0};      // chunk bytes loads took from memory
  std::atomic<uint64_t> memory_bytes_in_place{0};  // of those, copied where they lie
  // Of those, verified before the load and not read again.
  std::atomic<uint64_t> memory_bytes_checked_early{0};
  std::atomic<uint64_t> load_fallback_chunks{0};  // failed verification, read from the next tier
  // Disk bytes reserved by every save in flight, per job: the quota
  // (--job_max_disk_bytes) counts them with the committed steps.
  DiskReservations disk_reservations{};
  // At the cluster's coordinator: its registry of hosts, and the rounds of
  // ckptctl verify of memory-tier steps spread over them; null elsewhere.
  // Set before serving.
  const cluster::ClusterServiceImpl* cluster = nullptr;
  cluster::VerifyRounds* verify_rounds = nullptr;
};

// Which of this daemon's stores holds a step (tier/stores.h).
inline tier::Stores StoresOf(NodeContext& context) {
  return tier::Stores(context.backend, context.coordinator.catalog(), context.memory_tier);
}

}  // namespace ckpt::session

#endif  // CKPT_DAEMON_SESSION_NODE_CONTEXT_H_
