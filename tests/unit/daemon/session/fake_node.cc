#include "tests/unit/daemon/session/fake_node.h"

#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/host/host_runtime.h"

namespace ckpt::session::testing {
namespace {

constexpr char kRoot[] = "/ckpt";

}  // namespace

FakeNode::FakeNode(uint64_t pool_bytes, uint64_t chunk_bytes,
                   std::unique_ptr<gpu::DeviceRuntime> gpu)
    : gpu_(std::move(gpu)) {
  options_.storage_root = kRoot;
  options_.host_name = "testhost";
  options_.pool_bytes = pool_bytes;
  options_.chunk_bytes = chunk_bytes;
  options_.batch_bytes = 256 << 10;
  options_.save_batch_bytes = 256 << 10;
  options_.writer_threads = 2;
  options_.reader_threads = 2;
  // Barriers end by arrivals and events in these tests, never by time.
  options_.plan_timeout = absl::Hours(1);
  options_.snapshot_timeout = absl::Hours(1);
  (void)faults_.CreateDirs(kRoot);

  if (gpu_ == nullptr) gpu_ = std::make_unique<gpu::HostRuntime>("no GPU in session unit tests");
  ipc_ = std::make_unique<gpu::IpcMappingCache>(gpu_.get());
  pool::PoolOptions pool;
  pool.bytes = pool_bytes;
  pool.segment_bytes = pool_bytes;
  absl::StatusOr<std::unique_ptr<pool::ShmPool>> created = pool::ShmPool::Create(pool);
  if (!created.ok()) std::abort();
  pool_ = std::move(*created);

  const planning::SavePlannerOptions planner = SavePlannerOptionsOf(options_, pool_->alignment());
  coordinator::CatalogOptions catalog;
  catalog.host = options_.host_name;
  catalog.limits = options_.manifest_limits;
  coordinator_ = std::make_unique<coordinator::Coordinator>(faults_, kRoot, planner, catalog);
  writers_ = std::make_unique<exec::WriterPool>(options_.writer_threads, 8);
  readers_ = std::make_unique<exec::ReaderPool>(options_.reader_threads);
  sessions_ = std::make_unique<RankSessions>();
  absl::StatusOr<auth::AccessPolicy> policy = auth::AccessPolicy::Create({}, geteuid());
  if (!policy.ok()) std::abort();
  auth_ = std::make_unique<auth::Authenticator>(*std::move(policy), auth::BearerTokens());
  owners_ = std::make_unique<auth::JobOwners>(faults_, kRoot);
  metrics::MetricsOptions metrics;
  metrics.log_sink = [](const std::string&) {};  // quiet: the tests assert statuses
  metrics_ = std::make_unique<metrics::Metrics>(metrics);
  v1::HostIdentity host;
  host.set_host(options_.host_name);
  context_.reset(new NodeContext{options_, *gpu_, *ipc_, host, *coordinator_, faults_, *pool_,
                                 *writers_, *readers_, *sessions_, bytes_written_, bytes_read_,
                                 commits_, *auth_, *owners_, *metrics_});
}

FakeNode::~FakeNode() = default;

RankSession FakeNode::Attach(const std::string& job, int rank, int world) {
  absl::StatusOr<RankSession> session =
      sessions_->Attach(job, rank, world, rank, auth::Principal::LocalUser(geteuid()), world);
  if (!session.ok()) std::abort();
  return *session;
}

absl::Status FakeNode::SaveRank(SaveSession& save, const RankSession& rank,
                                const RankState& state) {
  absl::StatusOr<v1::PlanSaveResponse> planned = save.Plan(rank, state.request);
  if (!planned.ok()) return planned.status();
  for (;;) {
    absl::StatusOr<v1::SaveBatch> batch = save.NextBatch(rank);
    if (!batch.ok()) return batch.status();
    // As the client library copies: each slice from the rank's own bytes
    // into the pool, where the daemon's writers read it.
    for (const v1::BatchSlice& slice : batch->slices()) {
      const std::string& from = slice.kind() == v1::SaveItem::OBJECT
                                    ? state.object_bytes.at(slice.index())
                                    : state.shard_bytes.at(slice.index());
      if (slice.item_offset() + slice.length() > from.size() ||
          slice.pool_offset() + slice.length() > pool_->capacity()) {
        return absl::InternalError("the session handed out a slice outside the item or the pool");
      }
      std::memcpy(pool_->base() + slice.pool_offset(), from.data() + slice.item_offset(),
                  slice.length());
    }
    v1::SubmitSnapshotRequest submit;
    submit.set_batch_id(batch->batch_id());
    if (absl::Status s = save.SubmitSnapshot(rank, submit); !s.ok()) return s;
    if (batch->last()) break;
  }
  for (;;) {
    absl::StatusOr<v1::WaitSaveResponse> waited = save.Wait(absl::Seconds(10));
    if (!waited.ok()) return waited.status();
    if (waited->done()) return absl::OkStatus();
  }
}

absl::Status FakeNode::LoadRank(LoadSession& load, const RankSession& rank,
                                const v1::LoadRequest& request, std::vector<std::string>* out,
                                std::vector<std::string>* objects) {
  absl::StatusOr<v1::LoadResponse> answered = load.Load(rank, request);
  if (!answered.ok()) return answered.status();
  objects->assign(request.object_keys_size(), std::string());
  for (int i = 0; i < answered->object_bytes_size(); ++i) {
    (*objects)[i].resize(answered->object_bytes(i));
  }
  uint64_t done = 0;
  for (;;) {
    absl::StatusOr<v1::LoadBatch> batch = load.NextBatch(rank, done, absl::Seconds(10));
    if (!batch.ok()) return batch.status();
    done = batch->batch_id();
    for (const v1::Delivery& d : batch->deliveries()) {
      if (d.from_memory()) return absl::InternalError("no memory tier here");
      std::string& to =
          d.target() == v1::Delivery::OBJECT ? objects->at(d.request()) : out->at(d.request());
      for (uint64_t i = 0; i < std::max<uint64_t>(d.count(), 1); ++i) {
        const uint64_t src = d.pool_offset() + i * d.src_stride();
        const uint64_t dst = d.dest_offset() + i * d.dest_stride();
        if (src + d.length() > pool_->capacity() || dst + d.length() > to.size()) {
          return absl::InternalError("the session delivered outside the pool or the buffer");
        }
        std::memcpy(to.data() + dst, pool_->base() + src, d.length());
      }
    }
    if (batch->last()) break;
  }
  // Releases the last batch's room.
  (void)load.NextBatch(rank, done, absl::ZeroDuration());
  return absl::OkStatus();
}

uint8_t PatternByte(uint32_t seed, int64_t at) {
  uint64_t x = (static_cast<uint64_t>(seed) << 32) ^ static_cast<uint64_t>(at);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<uint8_t>(x);
}

void AddShard(RankState& state, const std::string& fqn, int64_t global, int64_t begin,
              int64_t length, uint32_t seed) {
  v1::TensorShard* shard = state.request.add_shards();
  shard->set_fqn(fqn);
  shard->set_dtype(v1::UINT8);
  shard->add_global_shape(global);
  shard->mutable_region()->mutable_flat()->set_begin(begin);
  shard->mutable_region()->mutable_flat()->set_end(begin + length);
  std::string bytes(length, '\0');
  for (int64_t i = 0; i < length; ++i) bytes[i] = static_cast<char>(PatternByte(seed, begin + i));
  state.shard_bytes.push_back(std::move(bytes));
}

void AddObject(RankState& state, const std::string& key, const std::string& bytes) {
  v1::ObjectDesc* object = state.request.add_objects();
  object->set_key(key);
  object->set_length(bytes.size());
  state.object_bytes.push_back(bytes);
}

void AddLoadShard(v1::LoadRequest& request, const std::string& fqn, int64_t global, int64_t begin,
                  int64_t length) {
  v1::TensorShard* shard = request.add_tensors();
  shard->set_fqn(fqn);
  shard->set_dtype(v1::UINT8);
  shard->add_global_shape(global);
  shard->mutable_region()->mutable_flat()->set_begin(begin);
  shard->mutable_region()->mutable_flat()->set_end(begin + length);
}

}  // namespace ckpt::session::testing
