#include "daemon/service/node_daemon.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/auth/pem_file.h"
#include "daemon/codec/chunk_codec.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/service/heap_trim.h"
#include "daemon/service/metrics_sampler.h"
#include "daemon/service/refusal_interceptor.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/s3/s3_backend.h"
#include "daemon/tier/erasure_code.h"
#include "daemon/tier/held_files_verify.h"
#include "gpu/device_factory.h"
#include "proto/lib/request_limits.h"
#include "proto/lib/status_context.h"

namespace ckpt::service {
namespace {

// This host's memory in bytes; 0 where the system cannot say.
uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  return pages > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(getpagesize()) : 0;
}

// The memory-tier manifests a registration carries (cluster.proto).
constexpr int kMaxMemoryManifests = 64;

constexpr absl::Duration kReapInterval = absl::Milliseconds(100);
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);
// Saves and loads whose progress a heartbeat carries (of each; the
// coordinator keeps as many).
constexpr int kMaxHeartbeatProgress = 64;
// What the coordinator keeps of a heartbeat's carried jobs (cluster.proto).
constexpr int kMaxCarriedJobs = 64;
constexpr int kMaxCarriedRanks = 4096;

void AddCarriedJobs(const std::map<std::string, session::RankSessions::SpreadJob>& jobs,
                    v1::HeartbeatRequest& beat) {
  int ranks = 0;
  for (const auto& [job, spread] : jobs) {
    if (beat.jobs_size() == kMaxCarriedJobs || ranks == kMaxCarriedRanks) break;
    v1::CarriedJob* carried = beat.add_jobs();
    carried->set_job(job);
    carried->set_world_size(static_cast<uint32_t>(spread.world_size));
    for (int rank : spread.ranks) {
      if (ranks == kMaxCarriedRanks) break;
      carried->add_ranks(static_cast<uint32_t>(rank));
      ++ranks;
    }
  }
}

// A zero or negative bound would refuse everything (or, cast, allow
// anything): refuse to start instead, naming the flag.
// --memory_tier_erasure: "k,m", or empty for (0, 0): replicas instead.
absl::StatusOr<std::pair<int, int>> ParseErasure(const std::string& flag) {
  if (flag.empty()) return std::pair<int, int>(0, 0);
  std::vector<std::string> parts = absl::StrSplit(flag, ',');
  int k = 0, m = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &k) || !absl::SimpleAtoi(parts[1], &m) ||
      k < 1 || m < 1 || k + m > tier::ErasureCode::kMaxShares) {
    return absl::InvalidArgumentError(
        absl::StrCat("--memory_tier_erasure is \"k,m\" with k, m >= 1 and k + m <= ",
                     tier::ErasureCode::kMaxShares, ", not \"", flag.substr(0, 64), "\""));
  }
  return std::pair<int, int>(k, m);
}

absl::Status CheckLimits(const RequestLimits& l, const planning::ManifestLimits& m) {
  const std::pair<const char*, int64_t> bounds[] = {
      {"--max_world_size", l.max_world_size},
      {"--max_tensors_per_plan", l.max_tensors_per_plan},
      {"--max_objects_per_plan", l.max_objects_per_plan},
      {"--max_dims", l.max_dims},
      {"--max_runs_per_shard", l.max_runs_per_shard},
      {"--max_regions_per_tensor", l.max_regions_per_tensor},
      {"--max_user_metadata_entries", l.max_user_metadata_entries},
      {"--max_user_metadata_bytes", l.max_user_metadata_bytes},
      {"--max_name_bytes", l.max_name_bytes},
      {"--max_object_bytes", l.max_object_bytes},
      {"--max_shard_bytes", l.max_shard_bytes},
      {"--max_bytes_per_rank", l.max_bytes_per_rank},
      {"--max_chunks_per_save", l.max_chunks_per_save},
      {"--max_message_bytes", l.max_message_bytes},
      {"--max_manifest_tensors", m.max_tensors},
      {"--max_manifest_shards", m.max_shards},
      {"--max_manifest_chunks", m.max_chunks},
      {"--max_manifest_objects", m.max_objects},
  };
  for (const auto& [flag, value] : bounds) {
    if (value <= 0)
      return absl::InvalidArgumentError(absl::StrCat(flag, " must be positive, not ", value));
  }
  if (l.max_world_size > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("--max_world_size must be at most ", INT_MAX));
  }
  if (m.max_memory_bytes == 0) {
    return absl::InvalidArgumentError("--max_manifest_memory_bytes must be positive");
  }
  if (m.max_manifest_bytes == 0 || m.max_chunk_bytes == 0) {
    return absl::InvalidArgumentError(
        "--max_manifest_bytes and --max_manifest_chunk_bytes must be positive");
  }
  return absl::OkStatus();
}

// True when something accepts connections on the socket: another ckptd.
bool SocketIsServed(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const bool served = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return served;
}

// The pool is one descriptor per segment plus gRPC's and the storage's:
// systemd's default soft limit (1024) is too low for a large pool with
// many ranks, and the hard limit is there to be used.
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// The socket files reach as far as the allow-lists do (unix_listener.h).
auth::SocketAccess SocketAccessOf(const auth::AccessPolicy& policy) {
  auth::SocketAccess access;
  if (!policy.AdmitsOthers()) return access;
  if (std::optional<gid_t> group = policy.SoleGroup(); group.has_value()) {
    access.reach = auth::SocketAccess::Reach::kGroup;
    access.group = *group;
  } else {
    access.reach = auth::SocketAccess::Reach::kEveryone;
  }
  return access;
}

// A session's segments go only to the user that attached it.
absl::StatusOr<std::string> SegmentOwner(const session::RankSessions& sessions,
                                         const std::string& id, uid_t uid) {
  absl::StatusOr<session::RankSession> session = sessions.Find(id);
  if (!session.ok()) return session.status();
  if (session->uid != uid) {
    return absl::PermissionDeniedError(
        absl::StrCat(auth::DescribeUid(uid), " may not map the pool segments of a session of ",
                     auth::DescribeUid(session->uid), " (job ", session->job, ")"));
  }
  return session->job;
}

std::string DefaultHostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  std::string host(name);
  // Host names become file names: keep them inside the allowed set.
  for (char& c : host) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return host;
}

// "host:port" with its host replaced by 127.0.0.1 unless it is loopback
// already: a listener without TLS and a token must not face the network.
std::string LoopbackOnly(const std::string& address) {
  const size_t colon = address.rfind(':');
  const std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  const std::string port = colon == std::string::npos ? address : address.substr(colon + 1);
  if (host == "localhost" || host == "[::1]" || absl::StartsWith(host, "127.")) return address;
  return absl::StrCat("127.0.0.1:", port);
}

}  // namespace

NodeDaemon::NodeDaemon(session::DaemonOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<NodeDaemon>> NodeDaemon::Create(session::DaemonOptions options) {
  return Create(std::move(options), nullptr);
}

absl::StatusOr<std::unique_ptr<NodeDaemon>> NodeDaemon::Create(
    session::DaemonOptions options, std::unique_ptr<storage::Backend> backend) {
  if (options.storage_root.empty()) return absl::InvalidArgumentError("--storage_root is required");
  if (options.socket_path.empty()) return absl::InvalidArgumentError("--socket_path is required");
  if (options.writer_threads <= 0 || options.reader_threads < 0) {
    return absl::InvalidArgumentError(
        "--writer_threads must be positive and --reader_threads positive or 0 (the default)");
  }
  if (absl::Status s = CheckLimits(options.limits, options.manifest_limits); !s.ok()) return s;
  if (absl::Status s = codec::CodecNamed(options.codec).status(); !s.ok()) {
    return WithContext(s, "--codec");
  }
  if (options.delta_every < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--delta_every must be 1 or more, not ", options.delta_every));
  }
  if (options.heartbeat_interval < absl::Milliseconds(10) ||
      options.heartbeat_timeout < 2 * options.heartbeat_interval) {
    return absl::InvalidArgumentError(
        "--heartbeat_interval_s must be at least 0.01 and --heartbeat_timeout_s at least twice "
        "it");
  }
  if (absl::StatusOr<std::pair<int, int>> e = ParseErasure(options.memory_tier_erasure); !e.ok()) {
    return e.status();
  }
  if (options.memory_tier_replicas < 0) {
    return absl::InvalidArgumentError("--memory_tier_replicas must not be negative");
  }
  if (options.memory_tier_keep_steps < 1) {
    return absl::InvalidArgumentError("--memory_tier_keep_steps must be at least 1");
  }
  if (options.peer_wait < absl::Seconds(1)) {
    return absl::InvalidArgumentError("--peer_wait_s must be at least 1");
  }
  if (options.plan_threads < 0 || options.plan_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--plan_threads must be 0 (every core) to 1024, not ", options.plan_threads));
  }
  if (options.host_name.empty()) options.host_name = DefaultHostName();
  // Only one daemon per socket. With none alive, the sockets left by a
  // killed one are stale and reclaimed (the pool is memfds: nothing of it
  // outlives its daemon and its ranks).
  if (SocketIsServed(options.socket_path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("another ckptd is serving ", options.socket_path));
  }
  RaiseDescriptorLimit();
  std::unique_ptr<NodeDaemon> d(new NodeDaemon(std::move(options)));
  const session::DaemonOptions& o = d->options_;

  storage::PosixBackendOptions posix;
  posix.use_io_uring = o.use_io_uring;
  posix.use_o_direct = o.use_o_direct;
  posix.queue_depth = o.queue_depth;
  if (backend == nullptr && storage::s3::IsS3Url(o.storage_root)) {
    absl::StatusOr<std::unique_ptr<storage::Backend>> s3 =
        storage::s3::OpenS3Root(o.storage_root, o.s3);
    if (!s3.ok()) return s3.status();
    backend = std::move(*s3);
  }
  if (backend == nullptr) {
    absl::StatusOr<std::unique_ptr<storage::Backend>> named =
        storage::NewBackend(o.storage_backend, posix);
    if (!named.ok()) return named.status();
    backend = std::move(*named);
  }
  d->backend_ = std::move(backend);
  d->options_.object_store = d->backend_->IsObjectStore();
  if (d->options_.reader_threads == 0) d->options_.reader_threads = o.object_store ? 4 : 2;
  if (absl::Status s = d->backend_->CreateDirs(o.storage_root); !s.ok()) {
    return WithContext(s, "storage root");
  }

  d->gpu_ = gpu::DetectDeviceRuntime();
  d->ipc_ = std::make_unique<gpu::IpcMappingCache>(d->gpu_.get());
  pool::PoolOptions pool_options;
  pool_options.bytes = o.pool_bytes;
  pool_options.owner_share = o.job_pool_share;
  pool_options.segment_bytes = o.pool_segment_bytes;
  // A segment renewed for another job is new memory at the same addresses:
  // its GPU pinning and the rings' fixed buffers must follow. No I/O or copy
  // touches it meanwhile (it is wholly free).
  NodeDaemon* self = d.get();
  pool_options.before_renew = [self](char* at, uint64_t) {
    if (self->pool_registered_) (void)self->gpu_->UnregisterHostMemory(at);
  };
  pool_options.after_renew = [self](char* at, uint64_t bytes) {
    if (self->pool_registered_) (void)self->gpu_->RegisterHostMemory(at, bytes);
    self->backend_->RenewMemory(at, bytes);
  };
  absl::StatusOr<std::unique_ptr<pool::ShmPool>> pool = pool::ShmPool::Create(pool_options);
  if (!pool.ok()) return pool.status();
  d->pool_ = std::move(*pool);
  if (d->gpu_->HasDevice()) {
    // Pinned once here, segment by segment (a renewal re-pins one), so
    // copies from the GPU run at full DMA speed.
    for (const auto& [at, bytes] : d->pool_->SegmentRanges()) {
      if (absl::Status s = d->gpu_->RegisterHostMemory(at, bytes); !s.ok()) return s;
    }
    d->pool_registered_ = true;
  }

  // Writes come from the pool and reads land in it: register it once.
  if (absl::Status s = d->backend_->RegisterMemory(d->pool_->base(), d->pool_->capacity(),
                                                   d->pool_->segment_bytes());
      !s.ok()) {
    return s;
  }

  const planning::SavePlannerOptions planner =
      session::SavePlannerOptionsOf(o, d->pool_->alignment());
  coordinator::CatalogOptions catalog;
  catalog.host = o.host_name;  // the instance id is chosen here, once per start
  catalog.limits = o.manifest_limits;
  catalog.split_manifest_min_chunks = o.manifest_split_min_chunks;
  // One bound on manifest reads for both tiers' catalogs.
  catalog.read_slots = std::make_shared<coordinator::ManifestReadSlots>();
  coordinator::RendezvousOptions rendezvous;
  // Hosts wait for each other as long as ranks wait for each other, plus
  // the time the registry takes to declare a silent host lost.
  rendezvous.plan_timeout = o.plan_timeout + o.heartbeat_timeout;
  rendezvous.write_timeout = o.snapshot_timeout + 2 * o.heartbeat_timeout;
  rendezvous.plan_cache_bytes = o.plan_cache_bytes;
  rendezvous.plan_budget = std::make_shared<planning::PlanBudget>(
      o.plan_memory_bytes > 0 ? o.plan_memory_bytes
                              : std::max<uint64_t>(PhysicalMemoryBytes() / 2, uint64_t{1} << 30));
  rendezvous.lost_ranks_grace = 2 * o.heartbeat_interval;
  d->coordinator_ = std::make_unique<coordinator::Coordinator>(*d->backend_, o.storage_root,
                                                               planner, catalog, rendezvous);
  absl::StatusOr<int> removed = d->coordinator_->catalog().RemoveStalePartials();
  if (!removed.ok()) return removed.status();
  d->removed_partials_ = *removed;
  d->coordinator_->EnableRetention(o.retention);
  if (o.memory_tier_bytes > 0) {
    // The budget is taken as it comes, not at start: say so when it could
    // not be, before the host finds out by swapping or the OOM killer.
    const uint64_t physical = PhysicalMemoryBytes();
    if (physical > 0 && o.memory_tier_bytes + o.pool_bytes > physical / 2) {
      absl::FPrintF(stderr,
                    "ckptd: warning: --memory_tier_bytes (%d) and --pool_bytes (%d) are more than "
                    "half of this host's %d bytes of memory; the trainers need the rest\n",
                    o.memory_tier_bytes, o.pool_bytes, physical);
    }
    tier::MemoryTierOptions memory;
    memory.budget_bytes = o.memory_tier_bytes;
    memory.keep_steps = o.memory_tier_keep_steps;
    d->memory_tier_ =
        std::make_unique<tier::MemoryTier>(memory, planner, catalog, rendezvous, *d->coordinator_);
  }

  absl::StatusOr<auth::AccessPolicy> policy = auth::AccessPolicy::Create(o.access, geteuid());
  if (!policy.ok()) return policy.status();
  std::string admin_token, read_token;
  if (!o.token_file.empty()) {
    absl::StatusOr<std::string> token = auth::ReadTokenFile(o.token_file, "--token_file");
    if (!token.ok()) return token.status();
    admin_token = *token;
  }
  if (!o.read_token_file.empty()) {
    absl::StatusOr<std::string> token = auth::ReadTokenFile(o.read_token_file, "--read_token_file");
    if (!token.ok()) return token.status();
    read_token = *token;
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file go together");
  }
  auth::BearerTokens tokens(std::move(admin_token), std::move(read_token));
  if (!o.tokens_file.empty()) {
    if (absl::Status s = tokens.AddFile(o.tokens_file, "--tokens_file"); !s.ok()) return s;
  }
  d->access_note_ = absl::StrCat("unix socket for ", policy->Describe());
  d->auth_ = std::make_unique<auth::Authenticator>(*std::move(policy), std::move(tokens));
  // A job with data and no owner record is adopted by an admin, never by
  // whoever attaches first: its data may be on storage or in the memory tier.
  d->owners_ = std::make_unique<auth::JobOwners>(
      *d->backend_, o.storage_root,
      [backend = d->backend_.get(), root = o.storage_root,
       memory = d->memory_tier_.get()](const std::string& job) -> absl::StatusOr<bool> {
        absl::StatusOr<std::vector<std::string>> names =
            backend->ListDir(storage::JobDir(root, job));
        if (!names.ok() && !absl::IsNotFound(names.status())) return names.status();
        if (names.ok()) {
          for (const std::string& name : *names) {
            // The owner record, and the commit fence (EPOCH, EPOCH.lock and
            // an object store's EPOCH.lock.leases/): no data.
            if (absl::StartsWith(name, auth::kOwnerFileName) ||
                absl::StartsWith(name, storage::kEpochName)) {
              continue;
            }
            return true;
          }
        }
        if (memory == nullptr) return false;
        absl::StatusOr<std::vector<v1::CheckpointSummary>> held =
            memory->coordinator().catalog().ListCheckpoints(job);
        return held.ok() && !held->empty();
      });

  session::SessionLimits session_limits;
  session_limits.max_sessions = o.max_sessions;
  session_limits.max_world_size = static_cast<int>(o.limits.max_world_size);
  session_limits.max_sessions_per_principal = o.principal_max_sessions;
  session_limits.watch_grace = o.session_watch_grace;
  d->sessions_ = std::make_unique<session::RankSessions>(session_limits);
  // Each writer and reader sets up its I/O (io_uring ring, pool pinned as
  // fixed buffers) before the daemon serves, not inside the first save or
  // load: 0.2 s per thread for a 4.5 GiB pool here, seconds for large ones.
  auto prepare = [storage = d->backend_.get()] { storage->PrepareThread(); };
  d->writers_ = std::make_unique<exec::WriterPool>(o.writer_threads, std::max(1u, o.queue_depth),
                                                   o.writer_nice, prepare);
  d->readers_ = std::make_unique<exec::ReaderPool>(o.reader_threads, prepare);
  metrics::MetricsOptions metrics_options;
  metrics_options.max_jobs = o.metrics_max_jobs;
  d->metrics_ = std::make_unique<metrics::Metrics>(metrics_options);
  v1::HostIdentity host;
  host.set_host(o.host_name);
  host.set_address(o.listen_address);
  host.set_failure_domain(o.failure_domain);
  d->context_.reset(new session::NodeContext{
      d->options_, *d->gpu_, *d->ipc_, host, *d->coordinator_, *d->backend_, *d->pool_,
      *d->writers_, *d->readers_, *d->sessions_, d->bytes_written_, d->bytes_read_, d->commits_,
      *d->auth_, *d->owners_, *d->metrics_});
  d->context_->background = &d->background_;
  d->context_->memory_tier = d->memory_tier_.get();
  if (d->memory_tier_ != nullptr) {
    d->step_checks_ = std::make_unique<tier::EarlyStepChecks>(*d->memory_tier_, o.reader_threads);
    d->context_->step_checks = d->step_checks_.get();
  }
  d->service_ = std::make_unique<NodeService>(*d->context_, d->gpu_->HasDevice(), o.limits);
  // A session id asks for its job's pool segments; a session id, a newline
  // and a load id for the memory-tier files that load shares.
  d->segment_server_ = std::make_unique<SegmentServer>(
      [sessions = d->sessions_.get(), pool = d->pool_.get(), service = d->service_.get()](
          const std::string& request, uid_t uid) -> absl::StatusOr<pool::OwnerSegments> {
        const size_t newline = request.find('\n');
        absl::StatusOr<std::string> job = SegmentOwner(*sessions, request.substr(0, newline), uid);
        if (!job.ok()) return job.status();
        if (newline == std::string::npos) return pool->SegmentsOf(*job);
        return service->LoadMemorySpace(*job, request.substr(newline + 1));
      },
      // Segments are for ranks: only users who may attach may ask.
      [auth = d->auth_.get()](int fd, uid_t uid, gid_t gid) {
        return auth->OfLocalPeer(fd, uid, gid).Has(auth::Permission::kUse);
      });
  return d;
}

absl::Status NodeDaemon::Start() {
  // First, so a metrics address that cannot be served fails the start
  // before any rank is admitted.
  if (!options_.metrics_address.empty()) {
    metrics_->SetSampler([this] {
      metrics::NodeSample s = SampleNode(*context_);
      if (const cluster::LeaderElection* e = election_view_.load(std::memory_order_acquire)) {
        uint64_t fenced = coordinator_->fenced_commits();
        if (memory_tier_ != nullptr) fenced += memory_tier_->coordinator().fenced_commits();
        s.election = metrics::NodeSample::Election{.leading = e->leading(),
                                                   .epoch = e->epoch(),
                                                   .elections_won = e->elections_won(),
                                                   .leases_lost = e->leases_lost(),
                                                   .fenced_commits = fenced};
      }
      return s;
    });
    absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> metrics_server =
        metrics::MetricsServer::Start(options_.metrics_address, *metrics_);
    if (!metrics_server.ok()) return metrics_server.status();
    metrics_server_ = std::move(*metrics_server);
    absl::FPrintF(stderr, "ckptd: metrics on http://%s/metrics (port %d)\n",
                  options_.metrics_address, metrics_server_->port());
  }
  grpc::ServerBuilder builder;
  // Plans of large models are big, but a request is bounded before it is
  // parsed.
  const int max_message =
      static_cast<int>(std::min<int64_t>(options_.limits.max_message_bytes, INT_MAX));
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  int tcp_port = 0;
  std::string tcp_address = options_.listen_address;
  if (!tcp_address.empty()) {
    const bool tls = !options_.tls_cert_file.empty();
    std::shared_ptr<grpc::ServerCredentials> credentials;
    if (tls && auth_->tokens().configured()) {
      absl::StatusOr<std::string> cert =
          auth::ReadPemFile(options_.tls_cert_file, "--tls_cert_file");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = auth::ReadPemFile(options_.tls_key_file, "--tls_key_file");
      if (!key.ok()) return key.status();
      grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
      ssl.pem_key_cert_pairs.push_back({*key, *cert});
      if (!options_.tls_client_ca_file.empty()) {
        absl::StatusOr<std::string> ca =
            auth::ReadPemFile(options_.tls_client_ca_file, "--tls_client_ca_file");
        if (!ca.ok()) return ca.status();
        ssl.pem_root_certs = *ca;
        ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
      }
      credentials = grpc::SslServerCredentials(ssl);
      // Calls without a valid token end before their request is read.
      credentials->SetAuthMetadataProcessor(
          std::make_shared<auth::TokenAuthProcessor>(auth_->tokens()));
      absl::StrAppend(&access_note_, "; TCP ", tcp_address, " with TLS and a bearer token");
    } else {
      tcp_address = LoopbackOnly(tcp_address);
      credentials = grpc::InsecureServerCredentials();
      absl::StrAppend(&access_note_, "; TCP bound to ", tcp_address,
                      " only and every TCP call refused: it needs --tls_cert_file, --tls_key_file "
                      "and --tokens_file (or --token_file)");
    }
    builder.AddListeningPort(tcp_address, credentials, &tcp_port);
  }
  builder.RegisterService(service_.get());
  if (options_.coordinator) {
    // Memory-tier saves of jobs spread over hosts meet in this daemon's
    // memory tier (it keeps their manifests; the hosts keep the data).
    coordinator::Coordinator* memory = nullptr;
    if (memory_tier_ != nullptr) {
      memory = &memory_tier_->coordinator();
      const std::pair<int, int> erasure = *ParseErasure(options_.memory_tier_erasure);
      memory->ServeClusterMemoryTier(options_.memory_tier_replicas, erasure.first, erasure.second);
      coordinator_->LoadFromMemoryToo(&memory->catalog());
    }
    verify_rounds_ = std::make_unique<cluster::VerifyRounds>();
    // Member by member: the etcd hooks below are set only in etcd mode.
    cluster::ClusterServiceOptions cluster_options;
    cluster_options.instance = coordinator_->catalog().instance();
    cluster_options.heartbeat_interval = options_.heartbeat_interval;
    cluster_options.heartbeat_timeout = options_.heartbeat_timeout;
    cluster_options.coordinator = coordinator_.get();
    cluster_options.memory_coordinator = memory;
    cluster_options.verify_rounds = verify_rounds_.get();
    if (!options_.etcd_endpoints.empty()) {
      // One of several coordinators (docs/failover.md): it serves nodes
      // only while it leads, and fences its commits with its epoch.
      if (absl::Status s = ConnectEtcd(); !s.ok()) return s;
      // election_ is set once the server listens (its address is known
      // then): calls before that read the view, null until then.
      cluster_options.leading = [this] {
        cluster::LeaderElection* e = election_view_.load(std::memory_order_acquire);
        return e == nullptr ? absl::FailedPreconditionError("not campaigning yet")
                            : e->CheckLeading();
      };
      cluster_options.epoch = [this] {
        cluster::LeaderElection* e = election_view_.load(std::memory_order_acquire);
        return e == nullptr ? int64_t{0} : e->epoch();
      };
      cluster_options.describe_election = [this](v1::CoordinatorElection& out) {
        DescribeElection(out);
      };
      // A new leader learns the memory tier's steps from the hosts.
      if (memory != nullptr) {
        cluster_options.adopt_memory_steps = [this](const v1::RegisterHostRequest& request) {
          AdoptMemorySteps(request);
        };
      }
      const coordinator::CommitFencing fencing{.epoch = cluster_options.epoch,
                                               .still_leading = cluster_options.leading};
      coordinator_->FenceCommits(fencing);
      // The memory tier's commits too (its EPOCH stays in memory).
      if (memory != nullptr) memory->FenceCommits(fencing);
    }
    cluster_ = std::make_unique<cluster::ClusterServiceImpl>(*auth_, std::move(cluster_options));
    builder.RegisterService(cluster_.get());
    coordinator_service_ =
        std::make_unique<cluster::CoordinatorServiceImpl>(*auth_, *coordinator_, *cluster_, memory);
    builder.RegisterService(coordinator_service_.get());
    if (memory_tier_ != nullptr) {
      coordinator_service_->ServeVerifies(verify_rounds_.get());
      context_->cluster = cluster_.get();
      context_->verify_rounds = verify_rounds_.get();
    }
    if (memory_tier_ != nullptr) {
      spread_persists_ = std::make_unique<tier::SpreadPersists>(
          *coordinator_, tier::SpreadPersistOptions{
                             .deadline = options_.snapshot_timeout + 2 * options_.heartbeat_timeout,
                             .host_live = [cluster = cluster_.get()](const std::string& host) {
                               return cluster->HostLive(host);
                             }});
      spread_service_ =
          std::make_unique<SpreadPersistServiceImpl>(*auth_, *spread_persists_, *cluster_);
      builder.RegisterService(spread_service_.get());
      spread_client_ = std::make_unique<SpreadPersistClient>(*spread_persists_);
    }
    // Ranks of a job spread over hosts that attach here meet the others
    // in this process; not with etcd, where this coordinator may not lead
    // (ranks attach to node daemons, which follow the leader).
    if (options_.etcd_endpoints.empty()) {
      cluster_saves_ = std::make_unique<cluster::LocalCoordinatorClient>(
          *coordinator_, [this] { return stop_.HasBeenNotified(); }, memory);
      context_->coordinator_client = cluster_saves_.get();
    }
  }
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<RefusalInterceptorFactory>(*metrics_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot start the gRPC server",
                                               tcp_address.empty() ? "" : " on ", tcp_address));
  }
  if (!tcp_address.empty() && tcp_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", tcp_address));
  }
  // Before the gRPC socket: a rank that attached can always fetch its
  // segments.
  const auth::SocketAccess access = SocketAccessOf(auth_->policy());
  if (absl::Status s = segment_server_->Start(SegmentSocketPath(options_.socket_path), access);
      !s.ok()) {
    return s;
  }
  // The Unix socket is accepted by us, so handlers learn each peer's uid.
  auth::UnixListener::Admit admit = [auth = auth_.get()](int fd, uid_t uid, gid_t gid) {
    return !auth->OfLocalPeer(fd, uid, gid).empty();
  };
  if (absl::Status s = unix_listener_.Start(options_.socket_path, access, std::move(admit),
                                            options_.principal_max_connections, server_.get());
      !s.ok()) {
    return s;
  }
  std::string peer_address;  // as other hosts reach it
  if (!options_.peer_address.empty()) {
    absl::StatusOr<std::unique_ptr<peer::PeerReceiver>> receiver = peer::PeerReceiver::Start(
        {.listen_address = options_.peer_address, .frame_auth = options_.peer_frame_auth});
    if (!receiver.ok()) return WithContext(receiver.status(), "--peer_address");
    peer_receiver_ = std::move(*receiver);
    const size_t colon = options_.peer_address.rfind(':');
    peer_address =
        absl::StrCat(options_.peer_address.substr(0, colon), ":", peer_receiver_->port());
    context_->peer = peer_receiver_.get();
    context_->peer_address = peer_address;
    absl::StrAppend(&access_note_, "; peer data channel on ", peer_address,
                    " (one-use tokens from the coordinator)");
  }
  const bool follows_etcd = !options_.coordinator && !options_.etcd_endpoints.empty();
  if (follows_etcd) {
    if (!options_.coordinator_address.empty()) {
      return absl::InvalidArgumentError(
          "--etcd_endpoints and --coordinator_address: a node follows the leader etcd names, "
          "or one fixed coordinator, not both");
    }
    if (absl::Status s = ConnectEtcd(); !s.ok()) return s;
  }
  if (!options_.coordinator_address.empty() || follows_etcd) {
    cluster::CoordinatorLinkOptions link;
    link.self.mutable_host()->set_address(peer_address);
    link.address = options_.coordinator_address;
    link.tls_ca_file = options_.coordinator_tls_ca_file;
    link.token_file = options_.coordinator_token_file;
    link.self.mutable_host()->set_host(options_.host_name);
    link.self.set_instance(coordinator_->catalog().instance());
    link.self.set_pool_bytes(pool_->capacity());
    link.self.set_failure_domain(options_.failure_domain);
    if (follows_etcd && memory_tier_ != nullptr) {
      link.registering = [this](v1::RegisterHostRequest& request) { AddMemoryManifests(request); };
    }
    link.sample = [this](v1::HeartbeatRequest& beat) {
      beat.set_pool_used(pool_->Stats().used);
      beat.set_sessions(static_cast<uint32_t>(service_->InFlight()));
      service_->InFlightProgress(kMaxHeartbeatProgress, beat.mutable_saves(), beat.mutable_loads());
      for (std::string& id : service_->SpanningSaveIds()) beat.add_save_ids(std::move(id));
      AddCarriedJobs(sessions_->SpreadJobs(), beat);
    };
    // Checks of what this host holds, for ckptctl verify at the coordinator.
    verify_runner_ = std::make_unique<cluster::VerifyRunner>([this](const v1::VerifyOrder& order) {
      if (memory_tier_ != nullptr)
        return tier::VerifyHeldFiles(*memory_tier_, order, options_.host_name);
      v1::HostVerifyReport nothing;  // no memory tier: holds nothing
      nothing.mutable_host()->set_host(options_.host_name);
      nothing.set_round(order.round());
      return nothing;
    });
    link.on_answer = [this](const v1::HeartbeatResponse& answer) {
      verify_runner_->Take(answer.verify_orders());
      service_->FailSpanningSaves(answer);
    };
    link.max_message_bytes =
        static_cast<int>(std::min<int64_t>(options_.limits.max_message_bytes, INT_MAX));
    absl::StatusOr<std::unique_ptr<cluster::CoordinatorLink>> started =
        cluster::CoordinatorLink::Start(std::move(link));
    if (!started.ok()) return started.status();
    coordinator_link_ = std::move(*started);
    if (coordinator_link_->channel() != nullptr) {
      verify_runner_->SetChannel(coordinator_link_->channel());
    }
    if (cluster_saves_ == nullptr) {
      // A call waits while other hosts plan or write; the coordinator
      // fails it itself when one is lost, and CheckCoordinatorContact when
      // the coordinator is.
      cluster::CoordinatorLink* l = coordinator_link_.get();
      auto remote = std::make_unique<cluster::RemoteCoordinatorClient>(
          cluster::RemoteCoordinatorClient::Target{
              .channel = [l] { return l->channel(); },
              .address = [l] { return l->address(); },
              .min_epoch = [l] { return l->highest_epoch(); },
              .generation = follows_etcd
                                ? std::function<uint64_t()>([l] { return l->generation(); })
                                : nullptr,
              .await_new_leader = follows_etcd ? std::function<bool(uint64_t, absl::Duration)>(
                                                     [l](uint64_t seen, absl::Duration timeout) {
                                                       return l->AwaitNewLeader(seen, timeout);
                                                     })
                                               : nullptr,
              // The old leader's lease lapses (at most a lease after its
              // death), a new one is elected and this host registers with
              // it: a trainer's save waits no longer than that.
              .failover_wait = options_.etcd_lease_ttl + absl::Seconds(2)},
          options_.plan_timeout + options_.snapshot_timeout + 2 * options_.heartbeat_timeout,
          [link = coordinator_link_.get()] { return link->registered(); },
          2 * options_.heartbeat_timeout);
      remote_saves_ = remote.get();
      // Its report waits for every host of the step; the coordinator ends
      // the copy by the same deadline plus heartbeats.
      if (memory_tier_ != nullptr) {
        spread_client_ = std::make_unique<SpreadPersistClient>(
            [l] { return l->channel(); },
            options_.snapshot_timeout + 4 * options_.heartbeat_timeout);
      }
      cluster_saves_ = std::move(remote);
      context_->coordinator_client = cluster_saves_.get();
    }
  }
  if (spread_client_ != nullptr) {
    memory_tier_->PersistSpreadWith(tier::MemoryTier::SpreadPersistence{
        .host = options_.host_name,
        .open = [client = spread_client_.get()](
                    const v1::SpreadPersistOpen& r) { return client->Open(r); },
        .report = [client = spread_client_.get()](
                      const v1::SpreadPersistCopied& r) { return client->Report(r); }});
  }
  if (follows_etcd) {
    leader_watch_ = std::make_unique<cluster::LeaderWatch>(
        *etcd_,
        cluster::LeaderWatchOptions{.name = options_.etcd_election,
                                    .on_change = [this](const cluster::CoordinatorLeader& before,
                                                        const cluster::CoordinatorLeader& now) {
                                      FollowLeader(before, now);
                                    }});
  }
  if (options_.coordinator && etcd_ != nullptr) {
    std::string address = options_.coordinator_advertise_address;
    if (address.empty() && tcp_port != 0) {
      const std::string host = tcp_address.substr(0, tcp_address.rfind(':'));
      // Nodes would reach themselves: the address must be said.
      if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen_address ", tcp_address,
                         " names no host nodes can reach: give --coordinator_advertise_address"));
      }
      address = absl::StrCat(host, ":", tcp_port);
    }
    absl::StatusOr<std::unique_ptr<cluster::LeaderElection>> election =
        cluster::LeaderElection::Start(
            *etcd_, {.name = options_.etcd_election,
                     .address = address,
                     .lease_ttl = options_.etcd_lease_ttl,
                     .on_elected = [this](int64_t epoch) { Elected(epoch); },
                     .on_deposed = [this](const std::string& why) { Deposed(why); }});
    if (!election.ok()) return election.status();
    election_ = std::move(*election);
    election_view_.store(election_.get(), std::memory_order_release);
    absl::StrAppend(&access_note_, "; campaigning to lead the coordinators as ", address, " (etcd ",
                    options_.etcd_endpoints, ")");
  }
  notifier_.Ready(StatusLine());
  reaper_ = std::thread([this] {
    // What a refused or failed request freed goes back to the system.
    HeapTrimmer heap_trimmer({.enabled = options_.return_freed_memory});
    while (!stop_.WaitForNotificationWithTimeout(kReapInterval)) {
      const absl::Time now = absl::Now();
      service_->Reap(now);
      CheckCoordinatorContact(now);
      metrics_->Tick(now);
      notifier_.Tick(now, StatusLine());
      heap_trimmer.Tick(now);
    }
  });
  return absl::OkStatus();
}

void NodeDaemon::Wait() { stop_.WaitForNotification(); }

absl::Status NodeDaemon::ConnectEtcd() {
  if (etcd_ != nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<cluster::EtcdClient>> etcd = cluster::EtcdClient::Create(
      cluster::EtcdClient::ParseEndpoints(options_.etcd_endpoints), absl::Seconds(2));
  if (!etcd.ok()) return etcd.status();
  etcd_ = std::move(*etcd);
  return absl::OkStatus();
}

void NodeDaemon::FollowLeader(const cluster::CoordinatorLeader& before,
                              const cluster::CoordinatorLeader& now) {
  coordinator_link_->Follow(now.address, now.epoch);
  if (std::shared_ptr<grpc::Channel> channel = coordinator_link_->channel(); channel != nullptr) {
    verify_runner_->SetChannel(std::move(channel));
  }
  if (now.address.empty()) {
    absl::FPrintF(stderr, "ckptd: no coordinator leads %s now (etcd)\n", options_.etcd_election);
  } else {
    absl::FPrintF(stderr, "ckptd: following coordinator %s (leader epoch %d)\n", now.address,
                  now.epoch);
  }
  if (before.address.empty()) return;  // what was in flight failed already
  const std::string reason = absl::StrCat(
      "the coordinator leader changed from ", before.address, " (epoch ", before.epoch, ") to ",
      now.address.empty() ? std::string("none")
                          : absl::StrCat(now.address, " (epoch ", now.epoch, ")"),
      ": what this host had in flight with the old leader is aborted");
  // Saves still planning ask the new leader (RemoteCoordinatorClient);
  // those planned by the old one cannot commit under another.
  service_->FailSpanningSaves(absl::UnavailableError(reason), /*planned_only=*/true);
  if (remote_saves_ != nullptr) remote_saves_->CancelAll(reason);
}

void NodeDaemon::AddMemoryManifests(v1::RegisterHostRequest& request) {
  constexpr int kMaxManifests = kMaxMemoryManifests;
  uint64_t budget = uint64_t{16} << 20;
  coordinator::Catalog& catalog = memory_tier_->coordinator().catalog();
  for (const v1::MemoryTierJob& job : memory_tier_->Jobs()) {
    // Newest first: the steps a job restarting after the failover loads.
    for (int i = job.steps_size() - 1; i >= 0; --i) {
      if (request.memory_manifests_size() == kMaxManifests) return;
      absl::StatusOr<std::string> bytes =
          catalog.ReadStepFile(job.job(), job.steps(i), storage::kManifestName, budget);
      if (!bytes.ok()) continue;  // gone meanwhile, or too large to send
      absl::StatusOr<v1::CheckpointManifest> manifest =
          planning::DecodeBoundedManifest(*bytes, "MANIFEST", catalog.limits());
      // Only the steps of jobs spread over hosts: one host's own steps
      // are its own daemon's business.
      if (!manifest.ok() || manifest->topology().hosts_size() < 2) continue;
      budget -= bytes->size();
      request.add_memory_manifests(std::move(*bytes));
    }
  }
}

void NodeDaemon::AdoptMemorySteps(const v1::RegisterHostRequest& request) {
  coordinator::Coordinator& memory = memory_tier_->coordinator();
  int adopted = 0;
  int seen = 0;
  for (const std::string& bytes : request.memory_manifests()) {
    // As many as a node sends (AddMemoryManifests); more are ignored.
    if (++seen > kMaxMemoryManifests) break;
    const std::string source =
        absl::StrCat("host ", request.host().host(), "'s memory-tier manifest");
    absl::StatusOr<v1::CheckpointManifest> manifest =
        planning::DecodeBoundedManifest(bytes, source, memory.catalog().limits());
    if (!manifest.ok()) continue;
    if (!planning::ValidateManifest(*manifest, manifest->job(), manifest->step(), source,
                                    memory.catalog().limits())
             .ok()) {
      continue;
    }
    absl::StatusOr<bool> known = memory.catalog().StepExists(manifest->job(), manifest->step());
    if (!known.ok() || *known) continue;
    // The hosts keep the data; the coordinator, the manifest.
    if (memory.CommitCopy(*manifest, [](const std::string&) { return absl::OkStatus(); }).ok()) {
      ++adopted;
    }
  }
  if (adopted > 0) {
    absl::FPrintF(stderr, "ckptd: learnt %d memory-tier steps from host %s\n", adopted,
                  request.host().host());
  }
}

void NodeDaemon::Elected(int64_t epoch) {
  // Hosts registered in an earlier term register again with this one.
  cluster_->ForgetHosts();
  absl::FPrintF(stderr, "ckptd: this coordinator leads from epoch %d\n", epoch);
}

void NodeDaemon::Deposed(const std::string& reason) {
  coordinator_->AbortAll(reason);
  if (memory_tier_ != nullptr) memory_tier_->coordinator().AbortAll(reason);
  cluster_->ForgetHosts();
}

void NodeDaemon::DescribeElection(v1::CoordinatorElection& out) {
  out.set_enabled(true);
  if (election_view_.load(std::memory_order_acquire) == nullptr) return;
  // What etcd says is asked at most once a second, by one caller at a
  // time: a flood of ckptctl cluster (read permission) must not become a
  // flood of etcd calls, nor hold every handler thread.
  {
    absl::MutexLock lock(&election_description_mu_);
    if (absl::Now() - election_described_at_ < absl::Seconds(1)) {
      out = election_description_;
      out.set_leading(election_view_.load(std::memory_order_acquire)->leading());
      return;
    }
    DescribeElectionNow(out);
    election_description_ = out;
    election_described_at_ = absl::Now();
  }
}

void NodeDaemon::DescribeElectionNow(v1::CoordinatorElection& out) {
  const cluster::LeaderElection* e = election_view_.load(std::memory_order_acquire);
  out.set_leading(e->leading());
  out.set_self(e->address());
  out.set_elections_won(e->elections_won());
  out.set_leases_lost(e->leases_lost());
  uint64_t fenced = coordinator_->fenced_commits();
  if (memory_tier_ != nullptr) fenced += memory_tier_->coordinator().fenced_commits();
  out.set_fenced_commits(fenced);
  // Briefly: ckptctl waits on this.
  absl::StatusOr<std::optional<cluster::EtcdCandidate>> leader =
      etcd_->Leader(options_.etcd_election, absl::Seconds(1));
  if (!leader.ok()) {
    out.set_etcd_error(leader.status().ToString());
  } else if (leader->has_value()) {
    out.set_leader((*leader)->value);
    out.set_epoch((*leader)->create_revision);
  }
  absl::StatusOr<std::vector<cluster::EtcdCandidate>> candidates =
      etcd_->Candidates(options_.etcd_election);
  if (candidates.ok()) {
    for (const cluster::EtcdCandidate& c : *candidates) {
      v1::CoordinatorElection::Candidate* out_c = out.add_candidates();
      out_c->set_address(c.value);
      out_c->set_revision(c.create_revision);
    }
  }
  for (const cluster::EtcdMemberHealth& m : etcd_->Health()) {
    v1::CoordinatorElection::Member* out_m = out.add_etcd();
    out_m->set_endpoint(m.endpoint);
    out_m->set_healthy(m.ok);
    out_m->set_version(m.version);
    out_m->set_raft_leader(m.is_raft_leader);
    out_m->set_error(m.error);
  }
}

void NodeDaemon::CheckCoordinatorContact(absl::Time now) {
  if (coordinator_link_ == nullptr) return;
  const absl::Duration silent = now - coordinator_link_->last_contact();
  if (silent <= options_.heartbeat_timeout) return;
  const absl::Status lost = absl::UnavailableError(
      absl::StrCat("host ", options_.host_name, " lost contact with the coordinator at ",
                   coordinator_link_->address(), " (no answer for ",
                   absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
                   "; it died, or the network is cut); aborted"));
  // Following etcd, saves still planning wait for the next leader
  // (RemoteCoordinatorClient); one fixed coordinator has none.
  service_->FailSpanningSaves(lost, /*planned_only=*/leader_watch_ != nullptr);
  if (remote_saves_ != nullptr) remote_saves_->CancelAll(std::string(lost.message()));
}

std::string NodeDaemon::StatusLine() const {
  const pool::PoolStats pool = pool_->Stats();
  return absl::StrFormat("serving: %d ranks attached, %d saves/loads in flight, pool %.0f%% used",
                         sessions_->attached(), service_->InFlight(),
                         pool.capacity == 0 ? 0.0 : 100.0 * pool.used / pool.capacity);
}

void NodeDaemon::Shutdown() {
  if (stop_.HasBeenNotified()) return;
  if (service_ != nullptr) {
    notifier_.Stopping(absl::StrCat("stopping: finishing or aborting ", service_->InFlight(),
                                    " saves/loads in flight"));
  }
  stop_.Notify();
}

NodeDaemon::~NodeDaemon() {
  // No scrape may read the parts below once they start going.
  metrics_server_.reset();
  if (metrics_) metrics_->SetSampler(nullptr);
  Shutdown();
  if (reaper_.joinable()) reaper_.join();
  // Its heartbeats sample the service: stopped now, kept (a plan in flight
  // asks it whether this host is registered) until the service is gone.
  // A leader resigns (another coordinator takes over at once, not after
  // the lease); a node stops following.
  if (leader_watch_) leader_watch_->Stop();
  if (election_) election_->Stop();
  if (coordinator_link_) coordinator_link_->Stop();
  if (service_) {
    // Saves whose ranks are all snapshotted can still commit: give what is
    // in flight a moment to finish, then abort the rest, well inside the
    // systemd stop timeout.
    const absl::Time grace_end = absl::Now() + kShutdownGrace;
    while (service_->InFlight() > 0 && absl::Now() < grace_end)
      absl::SleepFor(absl::Milliseconds(20));
    service_->AbortAll(absl::UnavailableError("ckptd is shutting down"));
  }
  // Commits waiting on other hosts end: remote calls cancelled, local waits
  // see stop_.
  if (remote_saves_ != nullptr) remote_saves_->Close("ckptd is shutting down");
  // Durable copies of steps spread over hosts end too (failed, their
  // directories removed); the memory tier's persister finds them closed.
  if (spread_client_ != nullptr) spread_client_->Close();
  if (spread_persists_ != nullptr) spread_persists_->Stop();
  if (step_checks_ != nullptr) step_checks_->Stop();
  background_.Drain();
  unix_listener_.Stop();
  if (segment_server_) segment_server_->Stop();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  writers_.reset();
  if (readers_) readers_->Stop();
  service_.reset();
  // After the loads that expect transfers are gone: cuts the connections
  // left, joins its threads.
  peer_receiver_.reset();
  coordinator_link_.reset();
  sessions_.reset();
  ipc_.reset();  // mappings close before the runtime goes
  if (pool_registered_) {
    for (const auto& [at, bytes] : pool_->SegmentRanges()) (void)gpu_->UnregisterHostMemory(at);
  }
  unlink(options_.socket_path.c_str());
}

}  // namespace ckpt::service
