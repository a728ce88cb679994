// Everything ckptd is configured with; main.cc fills it from flags.
#ifndef CKPT_DAEMON_SESSION_DAEMON_OPTIONS_H_
#define CKPT_DAEMON_SESSION_DAEMON_OPTIONS_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "daemon/auth/access_policy.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/retention_policy.h"
#include "daemon/planning/save_planner.h"
#include "daemon/storage/s3/s3_root.h"
#include "proto/lib/request_limits.h"

namespace ckpt::session {

struct DaemonOptions {
  std::string storage_root;
  std::string storage_backend = "posix";  // or "memory"; an s3:// root is S3
  storage::s3::S3Settings s3;
  bool use_io_uring = true;
  bool use_o_direct = true;
  unsigned queue_depth = 32;
  uint64_t pool_bytes = 1ull << 30;
  // The unit in which pool memory passes between jobs; 0: from the pool
  // size (pool::DefaultSegmentBytes: 16 to 256 segments, 64 MiB if it can).
  uint64_t pool_segment_bytes = 0;
  std::string socket_path;     // Unix socket for local ranks and ckptctl
  std::string listen_address;  // TCP for ckptctl and peers; empty: none
  std::string host_name;       // default: gethostname()
  int writer_threads = 4;
  int writer_nice = 10;  // writers yield the CPU to the ranks' copies
  // 0: 2 on a directory root, 4 on an object store, whose GETs wait on
  // the server rather than the CPU (NodeDaemon decides).
  int reader_threads = 0;
  // The root is an object store: set by NodeDaemon from its backend.
  bool object_store = false;
  uint64_t chunk_bytes = 4 << 20;
  // How writers store chunks when a save does not say (daemon/codec:
  // "none", "zstd", "grouped-zstd"); docs/compression.md has the figures
  // the default comes from.
  std::string codec = "none";
  // Step deltas on durable storage: a full step every delta_every saves of
  // a job and deltas against it between (1: every step full), when a save
  // does not say.
  int delta_every = 1;
  // Pool room handed to a rank at a time for its copies, and read ahead per
  // load: the unit of streaming through the pool.
  uint64_t batch_bytes = 32 << 20;
  // Pool room a save's rank copies into at a time; 0: sized from the pool
  // (SaveBatchBytes). Every batch costs two round trips to the daemon and a
  // hand-off to the copy threads, which a large pool need not pay 32 MiB at
  // a time; loads keep batch_bytes so delivery overlaps reading finely.
  uint64_t save_batch_bytes = 0;
  // The most of the pool one job may hold while others want room (0: a
  // fair share, the pool divided among the jobs that want it).
  double job_pool_share = 0;
  // Per-job quotas: saves of one job in flight at once (a new step beyond
  // it is refused), and bytes of its committed checkpoints on disk plus the
  // bytes its saves in flight reserved (disk_reservations.h; 0: no limit).
  // Refusals are RESOURCE_EXHAUSTED naming the quota and its flag.
  int job_max_saves_in_flight = 0;  // 0: no limit
  uint64_t job_max_disk_bytes = 0;
  int max_sessions = 4096;
  // Per principal (a local uid or a token's name), checked before the
  // global limits so that no one can exhaust them for others (0: none).
  int principal_max_sessions = 1024;
  int principal_max_saves_in_flight = 64;
  int principal_max_connections = 256;  // Unix socket connections of one uid
  // A session that opens no Watch stream within this is reaped (its rank
  // never started watching, or died first).
  absl::Duration session_watch_grace = absl::Seconds(10);
  // Bounds on what one request may ask (checked before anything is
  // allocated) and on what a MANIFEST read from disk may contain.
  RequestLimits limits;
  planning::ManifestLimits manifest_limits;
  // The longest one WaitSave call blocks before answering "not done yet".
  absl::Duration wait_slice = absl::Seconds(10);
  // A save whose ranks have not all planned (or all snapshotted) by then is
  // aborted: a rank that died must not hold the job's checkpoint forever.
  absl::Duration plan_timeout = absl::Seconds(120);
  // A save or load whose barrier waits for a rank with no session here
  // (never attached, or its process died) fails once that rank has been
  // absent this long, naming it, instead of at plan_timeout
  // (absent_ranks.h).
  absl::Duration rank_grace = absl::Seconds(10);
  absl::Duration snapshot_timeout = absl::Seconds(300);
  // How long a save or load may wait for room in the pool.
  absl::Duration pool_wait_timeout = absl::Seconds(60);
  // Who may use the Unix socket, and operators (daemon/auth/access_policy.h).
  auth::AccessLists access;
  // TCP: TLS (PEM files) and bearer tokens (files holding one line). TCP
  // serves only with a certificate, key and token; without them it binds
  // loopback only, and refuses every call until they are set.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;  // if set, TCP peers must present a certificate it signed
  std::string token_file;          // admin token
  std::string read_token_file;     // read-only token (status, list, inspect, verify)
  std::string tokens_file;         // "NAME PERMISSIONS TOKEN" per line (auth/bearer_token.h)

  // Many hosts (daemon/cluster): this daemon keeps the registry of node
  // daemons (ClusterService), and/or registers with the coordinator at
  // coordinator_address (TLS with its CA, its admin token) and heartbeats.
  bool coordinator = false;
  std::string coordinator_address;
  std::string coordinator_tls_ca_file;
  std::string coordinator_token_file;
  std::string failure_domain;  // e.g. the rack
  // Coordinator failover through etcd (docs/failover.md): with endpoints,
  // a coordinator campaigns for the lead under etcd_election, and a node
  // follows the leader etcd names instead of coordinator_address.
  std::string etcd_endpoints;
  std::string etcd_election = "/ckpt/coordinator";
  absl::Duration etcd_lease_ttl = absl::Seconds(5);
  std::string coordinator_advertise_address;  // default: listen_address
  // The peer data channel's listener (daemon/peer), host:port; empty: none.
  // Its address is what this host registers for other hosts to send to.
  std::string peer_address;
  // Every frame on the peer channel carries a MAC under its transfer's key
  // (daemon/peer/peer_wire.h). Off only on a data network no one else can
  // write to: hellos are checked either way.
  bool peer_frame_auth = true;
  // How long a load spread over hosts waits for another host to take or
  // send a group: that host's readers may be behind this one's by as long
  // as its ranks take to consume the groups before. A host that is lost
  // fails the load sooner (heartbeat_timeout).
  absl::Duration peer_wait = absl::Seconds(120);
  // The memory tier (daemon/tier/memory_tier.h): host memory, apart from
  // the pool, for saves to the memory tier (0: none, such saves are
  // refused), and the committed steps of each job it keeps.
  uint64_t memory_tier_bytes = 0;
  int memory_tier_keep_steps = 1;
  // The coordinator's: copies of each host's part of a memory-tier save
  // spread over hosts, on the hosts after it in name order.
  int memory_tier_replicas = 1;
  // The coordinator's: "k,m" erasure codes them instead; empty: replicas.
  std::string memory_tier_erasure;
  // Memory the coordinator's save plan cache may hold (all jobs).
  uint64_t plan_cache_bytes = uint64_t{1} << 30;
  // Memory the coordinator's save and load planners may take at once
  // (planning/plan_budget.h); 0: half of this host's memory.
  uint64_t plan_memory_bytes = 0;
  // Threads the coordinator's save and load planners run on (0: the
  // cores it may run on, at most 8; planning/parallel_for.h).
  int plan_threads = 0;
  // Commits write a manifest of this many tensor chunks or more as a root
  // and per-file chunk tables (planning/manifest_tables.h); 0: never.
  uint64_t manifest_split_min_chunks = 65536;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(5);

  // Checkpoints kept after each commit (--retain_*, --retention); the
  // default keeps every step.
  planning::RetentionConfig retention;
  // Prometheus /metrics listener (host:port); empty: none. The metrics and
  // the event log lines exist either way.
  std::string metrics_address;
  // Jobs with a ckpt_job label of their own; later ones share "_other".
  int metrics_max_jobs = 50;
  // Heap freed by requests goes back to the system (heap_trim.h); false
  // keeps it for the next plan.
  bool return_freed_memory = true;
};

// The save batch in effect: save_batch_bytes if set, else a sixteenth of the
// pool between batch_bytes and 256 MiB; never more than half the pool, so
// that a rank can copy one batch while another is written (a batch is at
// least one chunk whatever this says).
inline uint64_t SaveBatchBytes(const DaemonOptions& o) {
  constexpr uint64_t kMost = 256ull << 20;
  const uint64_t wanted = o.save_batch_bytes > 0
                              ? o.save_batch_bytes
                              : std::max(o.batch_bytes, std::min(o.pool_bytes / 16, kMost));
  return std::min(wanted, o.pool_bytes / 2);
}

// A load's read group: batch_bytes, on an object store at least 64 MiB
// (each file's share of a group is one ranged GET, and a server answers a
// few large GETs faster than many small ones: loads from Swift were 15%
// faster); never more than half the pool (a group larger than the pool
// could never get its room; a save of the same state through the same
// pool succeeded, so its load must too).
inline uint64_t LoadGroupBytes(const DaemonOptions& o) {
  constexpr uint64_t kObjectStoreLeast = 64ull << 20;
  const uint64_t wanted =
      o.object_store ? std::max(o.batch_bytes, kObjectStoreLeast) : o.batch_bytes;
  return std::min(wanted, o.pool_bytes / 2);
}

// A load's read group when every file it reads is in the memory tier and
// was verified before the load (early_step_check.h): its ranks only copy
// the bytes where they lie, and a larger batch costs nothing but saves
// round trips (256 MiB batches restored 10% faster than 32 MiB ones here).
// At most half the pool: the room a group takes if a file changed after
// all and a chunk fails.
inline uint64_t VerifiedLoadGroupBytes(const DaemonOptions& o) {
  constexpr uint64_t kMost = 256ull << 20;
  return std::min(std::max(o.batch_bytes, kMost), o.pool_bytes / 2);
}

// The save planner as the flags set it, for a pool of this alignment: the
// chunk size, the request limits and the manifest limits the catalog will
// accept (a plan whose manifest it would refuse is refused up front).
inline planning::SavePlannerOptions SavePlannerOptionsOf(const DaemonOptions& o,
                                                         uint64_t alignment) {
  planning::SavePlannerOptions planner;
  planner.chunk_bytes = o.chunk_bytes;
  planner.alignment = alignment;
  planner.limits = o.limits;
  planner.manifest_limits = o.manifest_limits;
  planner.threads = o.plan_threads;
  return planner;
}

}  // namespace ckpt::session

#endif  // CKPT_DAEMON_SESSION_DAEMON_OPTIONS_H_
