// ckptd: flags -> DaemonOptions -> NodeDaemon. Wiring only.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "daemon/fault/fault_points.h"
#include "daemon/planning/planner_memory.h"
#include "daemon/pool/huge_pages.h"
#include "daemon/service/node_daemon.h"

ABSL_FLAG(std::string, storage_root, "", "Directory (or mount) that holds the checkpoints");
ABSL_FLAG(std::string, storage_backend, "posix", "posix or memory (memory: testing only)");
ABSL_FLAG(std::string, s3_endpoint, "",
          "S3 server for an s3://bucket/prefix --storage_root, e.g. http://10.0.0.5:8080 "
          "(empty: AWS's endpoint of --s3_region)");
ABSL_FLAG(std::string, s3_region, "us-east-1", "S3 region (signatures name it)");
ABSL_FLAG(bool, s3_virtual_host, false,
          "Address buckets as bucket.host (else host/bucket); AWS's endpoint always does");
ABSL_FLAG(std::string, s3_ca_file, "", "CA bundle for an https S3 endpoint (empty: the system's)");
ABSL_FLAG(std::string, s3_credentials_file, "",
          "AWS credentials file to read S3 keys from (owner-only); else AWS_ACCESS_KEY_ID / "
          "AWS_SECRET_ACCESS_KEY, else ~/.aws/credentials");
ABSL_FLAG(std::string, s3_profile, "",
          "Profile of the credentials file (else AWS_PROFILE, else default)");
ABSL_FLAG(int32_t, s3_transfer_threads, 16, "S3 parts and ranged GETs in flight");
ABSL_FLAG(uint64_t, s3_part_bytes, 16ull << 20,
          "Size of an upload's first parts (later parts grow so no file exceeds the server's part "
          "count)");
ABSL_FLAG(int32_t, s3_request_deadline_s, 120,
          "An S3 request and all its retries end by then; a save that cannot finish fails naming "
          "host, key and upload");
ABSL_FLAG(bool, io_uring, true, "Write and read through io_uring (else pread/pwrite)");
ABSL_FLAG(bool, o_direct, true, "Bypass the page cache where the filesystem allows");
ABSL_FLAG(uint32_t, queue_depth, 32, "I/O operations in flight per writer thread");
ABSL_FLAG(uint64_t, pool_bytes, 1ull << 30, "Pinned staging memory, allocated at start-up");
ABSL_FLAG(uint64_t, pool_segment_bytes, 0,
          "Unit in which pool memory passes between jobs; each job's ranks map only its own "
          "segments (0: from --pool_bytes, 64 MiB where 16 to 256 segments allow)");
ABSL_FLAG(std::string, socket_path, "/run/ckptd/ckptd.sock", "Unix socket for ranks and ckptctl");
ABSL_FLAG(std::string, listen_address, "", "TCP address for ckptctl and peers, e.g. 0.0.0.0:7470");
ABSL_FLAG(std::string, host_name, "", "Name of this host in data files (default: hostname)");
ABSL_FLAG(int32_t, writer_threads, 4, "Writer threads (one data file and one io_uring each)");
ABSL_FLAG(int32_t, writer_nice, 10, "Nice value of writer threads (0: same priority as ranks)");
ABSL_FLAG(int32_t, reader_threads, 0,
          "Reader threads, shared by every load (each reads a group at a time); 0: 2, or 4 on "
          "an object store");
ABSL_FLAG(uint64_t, memory_tier_bytes, 0,
          "Host memory for the memory tier, apart from the pool: saves with tier memory are kept "
          "here (0: no memory tier; such saves are refused)");
ABSL_FLAG(int32_t, memory_tier_keep_steps, 1,
          "Committed memory-tier steps kept per job (the newest), besides the one being written");
ABSL_FLAG(int32_t, memory_tier_replicas, 1,
          "With --coordinator: copies of each host's part of a memory-tier save of a job spread "
          "over hosts, kept on the hosts after it (by name, in a ring); the commit waits for "
          "every copy");
ABSL_FLAG(std::string, memory_tier_erasure, "",
          "With --coordinator: \"k,m\" erasure codes memory-tier saves of jobs spread over hosts "
          "instead of replicating them (Reed-Solomon, groups of k+m hosts: each host holds its "
          "part and m/k of it in parity; a group survives the loss of any m hosts)");
ABSL_FLAG(uint64_t, chunk_bytes, 4 << 20, "Checksum and write unit (multiple of 4096)");
ABSL_FLAG(std::string, codec, "none",
          "How chunks are stored when a save does not say: none, zstd or grouped-zstd "
          "(docs/compression.md)");
ABSL_FLAG(int32_t, delta_every, 1,
          "Step deltas on durable storage when a save does not say: a full step every K saves "
          "of a job, the others stored as deltas against it (1: every step full)");
ABSL_FLAG(uint64_t, batch_bytes, 32 << 20,
          "Pool room a rank copies into at a time, and a load's read-ahead unit: saves and "
          "loads of any size stream through the pool this much at a time");
ABSL_FLAG(uint64_t, save_batch_bytes, 0,
          "Pool room a saving rank copies into at a time (0: a sixteenth of the pool, between "
          "--batch_bytes and 256 MiB)");
ABSL_FLAG(int32_t, job_max_saves_in_flight, 0,
          "Saves of one job in flight at once (planning, snapshotting or persisting); a save of "
          "another step beyond it is refused (0: no limit; the pool bounds their bytes either "
          "way, and a trainer saving every step on slow storage has many persisting)");
ABSL_FLAG(uint64_t, job_max_disk_bytes, 0,
          "Bytes of one job's committed checkpoints plus those its saves in flight reserved "
          "(durable and memory+durable; 0: no limit); a save beyond it is refused before "
          "anything is written");
ABSL_FLAG(double, job_pool_share, 0,
          "Most of the pool one job may hold while others wait, as a fraction (0: fair share "
          "among the jobs that want room)");
ABSL_FLAG(int32_t, max_sessions, 4096, "Attached ranks at once, over all jobs");
ABSL_FLAG(int32_t, principal_max_sessions, 1024,
          "Attached ranks of one user or token principal at once (0: no limit but the global)");
ABSL_FLAG(int32_t, principal_max_saves_in_flight, 64,
          "Saves in flight over all the jobs of one user or token principal (0: no limit)");
ABSL_FLAG(int32_t, principal_max_connections, 256,
          "Unix socket connections of one user at once (0: no limit)");
ABSL_FLAG(int32_t, session_watch_grace_s, 10,
          "Reap a rank's session that opens no Watch stream within this many seconds");
ABSL_FLAG(int64_t, max_world_size, 65536, "Ranks in one job");
// What one request may ask, checked before anything is allocated
// (proto/lib/request_limits.h says what each bounds).
ABSL_FLAG(int64_t, max_tensors_per_plan, 100'000,
          "Tensor shards in one rank's save or load request");
ABSL_FLAG(int64_t, max_objects_per_plan, 10'000, "Objects in one rank's save or load request");
ABSL_FLAG(int64_t, max_dims, 64, "Dimensions of a tensor");
ABSL_FLAG(int64_t, max_runs_per_shard, int64_t{1} << 20, "Strided copy runs one shard may need");
ABSL_FLAG(int64_t, max_regions_per_tensor, 16'384, "Distinct regions of one tensor in one save");
ABSL_FLAG(int64_t, max_user_metadata_entries, 1'024, "User metadata entries of a save");
ABSL_FLAG(int64_t, max_user_metadata_bytes, int64_t{1} << 20,
          "User metadata bytes (keys + values)");
ABSL_FLAG(int64_t, max_name_bytes, 255,
          "Job, tensor, object and session names (jobs: at most 255)");
ABSL_FLAG(int64_t, max_object_bytes, int64_t{64} << 30, "One object");
ABSL_FLAG(int64_t, max_shard_bytes, int64_t{1} << 40, "The bytes of one tensor shard");
ABSL_FLAG(int64_t, max_bytes_per_rank, int64_t{16} << 40,
          "Shards plus objects of one rank's request");
ABSL_FLAG(int64_t, max_chunks_per_save, int64_t{1} << 22,
          "Chunks (of --chunk_bytes) of one save, all ranks together");
ABSL_FLAG(int64_t, max_message_bytes, int64_t{64} << 20, "A gRPC message, in either direction");
// What a MANIFEST read from disk may contain (a copied or hostile one).
ABSL_FLAG(uint64_t, max_manifest_bytes, uint64_t{256} << 20,
          "A MANIFEST file (a split one: its root and chunk tables together)");
ABSL_FLAG(uint64_t, manifest_split_min_chunks, 65536,
          "Write a manifest of this many tensor chunks or more as a root MANIFEST and one chunk "
          "table per data file (docs/manifest.md), so readers check and parse it in parts; 0: "
          "never. Both formats are read whatever it says");
ABSL_FLAG(uint64_t, max_manifest_memory_bytes, uint64_t{256} << 20,
          "Memory to read one MANIFEST (its bytes, the parsed message, its checks), estimated "
          "before it is parsed; a larger one is refused, and so is a save that would write one");
ABSL_FLAG(bool, return_freed_memory, true,
          "Give heap that requests freed back to the system within about a second (false: keep "
          "it for the next plan; the daemon then stays as large as its largest request made it)");
ABSL_FLAG(int64_t, max_manifest_tensors, 1 << 20, "Tensors in one manifest");
ABSL_FLAG(int64_t, max_manifest_shards, 1 << 22, "Shards in one manifest, over all tensors");
ABSL_FLAG(int64_t, max_manifest_chunks, 1 << 24, "Chunks in one manifest");
ABSL_FLAG(int64_t, max_manifest_objects, 1 << 20, "Objects in one manifest");
ABSL_FLAG(uint64_t, max_manifest_chunk_bytes, uint64_t{1} << 32, "One stored chunk (a read unit)");
ABSL_FLAG(int32_t, plan_timeout_s, 120,
          "Abort a save or load whose ranks do not all arrive in time");
ABSL_FLAG(int32_t, rank_grace_s, 10,
          "Fail a save or load, naming the rank, once a rank it waits for has had no session "
          "here (never attached, or its process died) this long");
ABSL_FLAG(int32_t, snapshot_timeout_s, 300, "Abort a save whose ranks do not all snapshot in time");
ABSL_FLAG(int32_t, pool_wait_timeout_s, 60, "How long a save or load may wait for pool room");
// Who may call (daemon/auth/access_policy.h). The daemon's own user and
// root may always do everything.
ABSL_FLAG(std::vector<std::string>, allow_users, {},
          "Users (names or uids) who may attach ranks and save/load the jobs they own, over the "
          "Unix socket");
ABSL_FLAG(std::vector<std::string>, allow_groups, {},
          "Groups whose members may do what --allow_users may");
ABSL_FLAG(std::vector<std::string>, read_users, {},
          "Operators who may see every job: status, list, inspect, verify (not attach)");
ABSL_FLAG(std::vector<std::string>, read_groups, {},
          "Groups whose members may do what --read_users may");
ABSL_FLAG(std::vector<std::string>, admin_users, {},
          "Operators who may see every job and cancel, gc and adopt it (not attach)");
ABSL_FLAG(std::vector<std::string>, admin_groups, {},
          "Groups whose members may do what --admin_users may");
ABSL_FLAG(std::string, tls_cert_file, "", "TCP: the server certificate chain (PEM)");
ABSL_FLAG(std::string, tls_key_file, "", "TCP: the server's private key (PEM)");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "TCP: if set, peers must present a certificate signed by this CA (PEM)");
ABSL_FLAG(std::string, token_file, "",
          "TCP: file holding the admin bearer token (mode 0600). TCP serves only with TLS and a "
          "token; without both it binds loopback only and refuses every call");
ABSL_FLAG(std::string, read_token_file, "",
          "TCP: file holding a read-only bearer token (status, list, inspect, verify)");
ABSL_FLAG(std::string, tokens_file, "",
          "TCP: file (mode 0600) of principals, one \"NAME PERMISSIONS TOKEN\" per line; "
          "PERMISSIONS from use,read,admin. Each token acts as its principal, which owns the "
          "jobs it creates");
// Many hosts (daemon/cluster).
ABSL_FLAG(bool, coordinator, false,
          "Keep the registry of the node daemons of jobs spread over hosts (ClusterService, "
          "on the Unix socket and the TCP address)");
ABSL_FLAG(std::string, coordinator_address, "",
          "Register this host with the coordinator at host:port (TLS) and heartbeat");
ABSL_FLAG(std::string, coordinator_tls_ca_file, "",
          "The CA that signed the coordinator's certificate (PEM; default: the system's)");
ABSL_FLAG(std::string, coordinator_token_file, "",
          "File holding the coordinator's admin token (mode 0600)");
// Coordinator failover (docs/failover.md).
ABSL_FLAG(std::string, etcd_endpoints, "",
          "etcd members host:port,... With --coordinator: campaign to lead the coordinators "
          "through etcd's election; without: follow the leader etcd names (instead of "
          "--coordinator_address)");
ABSL_FLAG(std::string, etcd_election, "/ckpt/coordinator",
          "The election's etcd key prefix: one per cluster of coordinators and nodes");
ABSL_FLAG(double, etcd_lease_ttl_s, 5.0,
          "Coordinator: its leadership's etcd lease; a dead leader is replaced within about "
          "this long");
ABSL_FLAG(std::string, coordinator_advertise_address, "",
          "Coordinator with etcd: the host:port nodes reach it at (default: --listen_address)");
ABSL_FLAG(std::string, failure_domain, "", "This host's failure domain, e.g. its rack");
ABSL_FLAG(std::string, peer_address, "",
          "host:port of the peer data channel other daemons send bytes to (port 0: any); "
          "TCP, each transfer's hello and frames MAC'd under a key of its own: put it on the "
          "cluster's data network");
ABSL_FLAG(bool, peer_frame_auth, true,
          "Authenticate every frame received on the peer data channel (a MAC keyed per "
          "transfer); false only on a data network no other host can write to");
ABSL_FLAG(double, peer_wait_s, 120,
          "A load spread over hosts: how long to wait for another host to take or send a group "
          "of chunks (its ranks may be consuming earlier groups); a lost host fails it sooner");
ABSL_FLAG(uint64_t, plan_cache_mib, 1024,
          "Coordinator: memory the save plan cache may hold; a job whose plan is larger (about "
          "80 MiB at 8192 ranks x 1000 tensors, 1.2 GiB at 131,072) is planned afresh every "
          "step");
ABSL_FLAG(uint64_t, plan_memory_mib, 0,
          "Coordinator: memory the save and load planners may take at once, over all jobs (a "
          "save plan about 72 bytes per shard the ranks list, a load about 320 per stored "
          "chunk); a plan that does not fit waits for others up to --plan_timeout_s, one "
          "larger than all of it is refused; 0: half of this host's memory");
ABSL_FLAG(int32_t, plan_threads, 0,
          "Coordinator: threads a save or load plan runs on (its messages made, its manifest "
          "checked, its regions mapped onto chunks by several at once); 0: the cores it may "
          "run on, at most 8");
ABSL_FLAG(double, heartbeat_interval_s, 1.0, "Coordinator: how often hosts heartbeat");
ABSL_FLAG(double, heartbeat_timeout_s, 5.0,
          "Coordinator: a host silent this long is lost, and what it holds fails naming it");
// Retention after each commit (ckptctl gc does the same on demand).
ABSL_FLAG(int64_t, retain_last, 0,
          "Keep the newest N valid steps of each job, delete older ones after each commit "
          "(0: keep every step)");
ABSL_FLAG(int64_t, retain_every, 0, "Also keep the steps that are multiples of K (0: none)");
ABSL_FLAG(
    int64_t, retain_grace_s, 60,
    "Never delete a step committed less than this many seconds ago (also ckptctl gc's default)");
ABSL_FLAG(std::string, retention, "",
          "Per-job overrides, e.g. jobA:last=3:every=100,jobB:last=10:grace_s=0");
ABSL_FLAG(std::string, metrics_address, "",
          "Serve Prometheus metrics on http://<this>/metrics, e.g. 0.0.0.0:9470 (empty: no "
          "listener; the event log lines are written either way)");
ABSL_FLAG(int32_t, metrics_max_jobs, 50,
          "Jobs whose metrics carry their own job label: the first this many distinct jobs "
          "seen; later ones are reported together as ckpt_job=\"_other\", which bounds the series "
          "a daemon serving many jobs exports");
#ifdef CKPT_FAULT_INJECTION
ABSL_FLAG(std::string, fault_kill_at, "", "Testing: SIGKILL this process at the named fault point");
ABSL_FLAG(std::string, fault_corrupt_at, "",
          "Testing: flip a byte of what the named corruption point just made");
ABSL_FLAG(double, fault_pause_s, 0,
          "Testing: at --fault_kill_at's point, pause the thread this long instead of killing");
#endif

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ckptd: the ckpt node daemon (with the embedded coordinator)");
  absl::ParseCommandLine(argc, argv);
  ckpt::planning::KeepFreedMemoryForReuse();
#ifdef CKPT_FAULT_INJECTION
  ckpt::ArmCorruptionPoint(absl::GetFlag(FLAGS_fault_corrupt_at));
  ckpt::ArmFaultPoint(absl::GetFlag(FLAGS_fault_kill_at),
                      absl::Seconds(absl::GetFlag(FLAGS_fault_pause_s)));
#endif

  // Signals are taken by one thread with sigwait; block them everywhere else.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ckpt::session::DaemonOptions o;
  o.storage_root = absl::GetFlag(FLAGS_storage_root);
  o.storage_backend = absl::GetFlag(FLAGS_storage_backend);
  o.s3.endpoint = absl::GetFlag(FLAGS_s3_endpoint);
  o.s3.region = absl::GetFlag(FLAGS_s3_region);
  o.s3.virtual_host = absl::GetFlag(FLAGS_s3_virtual_host);
  o.s3.ca_file = absl::GetFlag(FLAGS_s3_ca_file);
  o.s3.credentials_file = absl::GetFlag(FLAGS_s3_credentials_file);
  o.s3.profile = absl::GetFlag(FLAGS_s3_profile);
  o.s3.transfer_threads = absl::GetFlag(FLAGS_s3_transfer_threads);
  o.s3.part_bytes = absl::GetFlag(FLAGS_s3_part_bytes);
  o.s3.request_deadline_s = absl::GetFlag(FLAGS_s3_request_deadline_s);
  o.use_io_uring = absl::GetFlag(FLAGS_io_uring);
  o.use_o_direct = absl::GetFlag(FLAGS_o_direct);
  o.queue_depth = absl::GetFlag(FLAGS_queue_depth);
  o.pool_segment_bytes = absl::GetFlag(FLAGS_pool_segment_bytes);
  o.pool_bytes = absl::GetFlag(FLAGS_pool_bytes);
  o.socket_path = absl::GetFlag(FLAGS_socket_path);
  o.listen_address = absl::GetFlag(FLAGS_listen_address);
  o.host_name = absl::GetFlag(FLAGS_host_name);
  o.writer_threads = absl::GetFlag(FLAGS_writer_threads);
  o.reader_threads = absl::GetFlag(FLAGS_reader_threads);
  o.writer_nice = absl::GetFlag(FLAGS_writer_nice);
  o.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  o.codec = absl::GetFlag(FLAGS_codec);
  o.delta_every = absl::GetFlag(FLAGS_delta_every);
  o.batch_bytes = absl::GetFlag(FLAGS_batch_bytes);
  o.save_batch_bytes = absl::GetFlag(FLAGS_save_batch_bytes);
  o.job_pool_share = absl::GetFlag(FLAGS_job_pool_share);
  o.job_max_saves_in_flight = absl::GetFlag(FLAGS_job_max_saves_in_flight);
  o.job_max_disk_bytes = absl::GetFlag(FLAGS_job_max_disk_bytes);
  o.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  ckpt::RequestLimits& l = o.limits;
  l.max_world_size = absl::GetFlag(FLAGS_max_world_size);
  l.max_tensors_per_plan = absl::GetFlag(FLAGS_max_tensors_per_plan);
  l.max_objects_per_plan = absl::GetFlag(FLAGS_max_objects_per_plan);
  l.max_dims = absl::GetFlag(FLAGS_max_dims);
  l.max_runs_per_shard = absl::GetFlag(FLAGS_max_runs_per_shard);
  l.max_regions_per_tensor = absl::GetFlag(FLAGS_max_regions_per_tensor);
  l.max_user_metadata_entries = absl::GetFlag(FLAGS_max_user_metadata_entries);
  l.max_user_metadata_bytes = absl::GetFlag(FLAGS_max_user_metadata_bytes);
  l.max_name_bytes = absl::GetFlag(FLAGS_max_name_bytes);
  l.max_object_bytes = absl::GetFlag(FLAGS_max_object_bytes);
  l.max_shard_bytes = absl::GetFlag(FLAGS_max_shard_bytes);
  l.max_bytes_per_rank = absl::GetFlag(FLAGS_max_bytes_per_rank);
  l.max_chunks_per_save = absl::GetFlag(FLAGS_max_chunks_per_save);
  l.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  ckpt::planning::ManifestLimits& m = o.manifest_limits;
  m.max_manifest_bytes = absl::GetFlag(FLAGS_max_manifest_bytes);
  m.max_memory_bytes = absl::GetFlag(FLAGS_max_manifest_memory_bytes);
  m.max_tensors = absl::GetFlag(FLAGS_max_manifest_tensors);
  m.max_shards = absl::GetFlag(FLAGS_max_manifest_shards);
  m.max_chunks = absl::GetFlag(FLAGS_max_manifest_chunks);
  m.max_objects = absl::GetFlag(FLAGS_max_manifest_objects);
  m.max_chunk_bytes = absl::GetFlag(FLAGS_max_manifest_chunk_bytes);
  // Objects and dims are bounded alike whether they come from a request or
  // from disk.
  m.max_object_bytes = static_cast<uint64_t>(l.max_object_bytes);
  m.max_dims = static_cast<int>(std::min<int64_t>(l.max_dims, 1 << 20));
  o.access.use_users = absl::GetFlag(FLAGS_allow_users);
  o.access.use_groups = absl::GetFlag(FLAGS_allow_groups);
  o.access.read_users = absl::GetFlag(FLAGS_read_users);
  o.access.read_groups = absl::GetFlag(FLAGS_read_groups);
  o.access.admin_users = absl::GetFlag(FLAGS_admin_users);
  o.access.admin_groups = absl::GetFlag(FLAGS_admin_groups);
  o.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  o.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  o.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  o.token_file = absl::GetFlag(FLAGS_token_file);
  o.read_token_file = absl::GetFlag(FLAGS_read_token_file);
  o.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  o.principal_max_sessions = absl::GetFlag(FLAGS_principal_max_sessions);
  o.principal_max_saves_in_flight = absl::GetFlag(FLAGS_principal_max_saves_in_flight);
  o.principal_max_connections = absl::GetFlag(FLAGS_principal_max_connections);
  o.session_watch_grace = absl::Seconds(std::max(1, absl::GetFlag(FLAGS_session_watch_grace_s)));
  o.coordinator = absl::GetFlag(FLAGS_coordinator);
  o.coordinator_address = absl::GetFlag(FLAGS_coordinator_address);
  o.coordinator_tls_ca_file = absl::GetFlag(FLAGS_coordinator_tls_ca_file);
  o.coordinator_token_file = absl::GetFlag(FLAGS_coordinator_token_file);
  o.failure_domain = absl::GetFlag(FLAGS_failure_domain);
  o.etcd_endpoints = absl::GetFlag(FLAGS_etcd_endpoints);
  o.etcd_election = absl::GetFlag(FLAGS_etcd_election);
  o.etcd_lease_ttl = absl::Seconds(absl::GetFlag(FLAGS_etcd_lease_ttl_s));
  o.coordinator_advertise_address = absl::GetFlag(FLAGS_coordinator_advertise_address);
  o.peer_address = absl::GetFlag(FLAGS_peer_address);
  o.peer_frame_auth = absl::GetFlag(FLAGS_peer_frame_auth);
  o.peer_wait = absl::Seconds(absl::GetFlag(FLAGS_peer_wait_s));
  o.memory_tier_bytes = absl::GetFlag(FLAGS_memory_tier_bytes);
  o.memory_tier_keep_steps = absl::GetFlag(FLAGS_memory_tier_keep_steps);
  o.memory_tier_replicas = absl::GetFlag(FLAGS_memory_tier_replicas);
  o.memory_tier_erasure = absl::GetFlag(FLAGS_memory_tier_erasure);
  o.plan_cache_bytes = std::min<uint64_t>(absl::GetFlag(FLAGS_plan_cache_mib), uint64_t{1} << 40)
                       << 20;
  o.manifest_split_min_chunks = absl::GetFlag(FLAGS_manifest_split_min_chunks);
  o.plan_threads = absl::GetFlag(FLAGS_plan_threads);
  o.plan_memory_bytes = std::min<uint64_t>(absl::GetFlag(FLAGS_plan_memory_mib), uint64_t{1} << 40)
                        << 20;
  o.heartbeat_interval = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_interval_s));
  o.heartbeat_timeout = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_timeout_s));
  o.plan_timeout = absl::Seconds(absl::GetFlag(FLAGS_plan_timeout_s));
  o.rank_grace = absl::Seconds(absl::GetFlag(FLAGS_rank_grace_s));
  o.snapshot_timeout = absl::Seconds(absl::GetFlag(FLAGS_snapshot_timeout_s));
  o.pool_wait_timeout = absl::Seconds(absl::GetFlag(FLAGS_pool_wait_timeout_s));
  o.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  o.metrics_max_jobs = absl::GetFlag(FLAGS_metrics_max_jobs);
  o.return_freed_memory = absl::GetFlag(FLAGS_return_freed_memory);

  absl::StatusOr<ckpt::planning::RetentionConfig> retention = ckpt::planning::ParseRetentionConfig(
      absl::GetFlag(FLAGS_retain_last), absl::GetFlag(FLAGS_retain_every),
      absl::GetFlag(FLAGS_retain_grace_s), absl::GetFlag(FLAGS_retention));
  if (!retention.ok()) {
    absl::FPrintF(stderr, "ckptd: cannot start: %s\n", retention.status().ToString());
    return 1;
  }
  o.retention = *retention;

  absl::StatusOr<std::unique_ptr<ckpt::service::NodeDaemon>> daemon =
      ckpt::service::NodeDaemon::Create(o);
  if (!daemon.ok()) {
    absl::FPrintF(stderr, "ckptd: cannot start: %s\n", daemon.status().ToString());
    return 1;
  }
  if (absl::Status s = (*daemon)->Start(); !s.ok()) {
    absl::FPrintF(stderr, "ckptd: cannot start: %s\n", s.ToString());
    return 1;
  }
  const auto& opts = (*daemon)->options();
  const uint64_t pool_huge = ckpt::pool::ShmemHugePageBytes(getpid());
  absl::FPrintF(stderr,
                "ckptd: serving on unix:%s%s%s; storage %s (%s); pool %d bytes in %d segments, "
                "%d in huge pages; %s; removed %d stale partial directories; access: %s\n",
                opts.socket_path, opts.listen_address.empty() ? "" : " and ", opts.listen_address,
                opts.storage_root, opts.storage_backend, opts.pool_bytes,
                (*daemon)->pool_segments(), pool_huge, (*daemon)->DescribeDevice(),
                (*daemon)->removed_partials(), (*daemon)->DescribeAccess());
  if (pool_huge < opts.pool_bytes / 2) {
    const std::string setting = ckpt::pool::ShmemHugeSetting();
    absl::FPrintF(stderr,
                  "ckptd: warning: the pool is in 4 KiB pages (%s is %s): direct I/O goes to the "
                  "disk in requests of about 1 MiB instead of 4 MiB, which halves loads on disks "
                  "that serve large requests faster; set it to advise (deploy/ckptd.service "
                  "does)\n",
                  ckpt::pool::kShmemHugeSetting, setting.empty() ? "missing" : setting);
  }
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    absl::FPrintF(stderr, "ckptd: signal %d, shutting down\n", sig);
    (*daemon)->Shutdown();
  });
  signal_thread.detach();
  (*daemon)->Wait();
  daemon->reset();
  return 0;
}
