#include "ckpt/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "client/src/ahead_call.h"
#include "client/src/parallel_copy.h"
#include "client/src/pool_mapping.h"
#include "gpu/device_factory.h"
#include "gpu/device_runtime.h"
#include "proto/lib/grpc_status.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/segment_handover.h"
#include "proto/lib/status_context.h"

namespace ckpt {
namespace {

using client::AheadCall;
using client::CopyPiece;
using client::PoolMapping;

constexpr int kMaxMessageBytes = 256 << 20;
constexpr auto kAttachTimeout = std::chrono::seconds(30);
constexpr int kAttachAttempts = 3;
constexpr auto kAttachRetryPause = std::chrono::milliseconds(100);

void ToProto(const HostTensor& t, v1::TensorShard* out, const gpu::IpcExport* device = nullptr) {
  if (device != nullptr) {
    v1::DeviceBuffer* buffer = out->mutable_device_buffer();
    buffer->set_ipc_handle(device->handle);
    buffer->set_offset(device->offset);
    buffer->set_allocation_bytes(device->allocation_bytes);
    buffer->set_device(device->device);
  }
  out->set_fqn(t.fqn);
  out->set_dtype(static_cast<v1::DType>(t.dtype));
  for (int64_t d : t.global_shape) out->add_global_shape(d);
  geo::Region region;
  switch (t.region.kind) {
    case Region::Kind::kWhole:
      region = geo::Region::Whole();
      break;
    case Region::Kind::kBox:
      region = geo::Region::Box(geo::Ints(t.region.offsets.begin(), t.region.offsets.end()),
                                geo::Ints(t.region.lengths.begin(), t.region.lengths.end()));
      break;
    case Region::Kind::kFlat:
      region = geo::Region::Flat(t.region.flat_begin, t.region.flat_end);
      break;
  }
  RegionToProto(region, out->mutable_region());
}

// State shared by a SaveHandle and the thread that runs the save.
class SaveState final : public SaveHandle {
 public:
  explicit SaveState(int64_t step) : step_(step) {}
  int64_t step() const override { return step_; }

  absl::Status WaitSnapshot() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&snapshot_done_));
    return snapshot_;
  }
  absl::Status WaitPersisted() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&persist_done_));
    return persisted_;
  }
  void SnapshotDone(absl::Status s) {
    absl::MutexLock lock(&mu_);
    snapshot_ = s;
    snapshot_done_ = true;
  }
  void PersistDone(absl::Status s) {
    absl::MutexLock lock(&mu_);
    if (!snapshot_done_) {
      snapshot_ = s;
      snapshot_done_ = true;
    }
    persisted_ = s;
    persist_done_ = true;
  }

 private:
  const int64_t step_;
  absl::Mutex mu_;
  bool snapshot_done_ ABSL_GUARDED_BY(mu_) = false;
  bool persist_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status snapshot_ ABSL_GUARDED_BY(mu_);
  absl::Status persisted_ ABSL_GUARDED_BY(mu_);
};

// One queued save: what the worker needs to run it.
struct SaveJob {
  std::shared_ptr<SaveState> state;
  int64_t step = 0;
  std::vector<HostTensor> tensors;
  std::vector<std::optional<gpu::IpcExport>> exports;
  std::vector<SaveObject> objects;
  SaveOptions options;
  std::optional<gpu::IpcEvent> ready;
};

// A channel of its own for each attach. gRPC keeps a channel's connection
// state (and, by default, shares it between channels to one target): after
// the daemon died, a channel sits out a reconnect backoff and fails every
// call at once with the old "connection refused", even after the daemon is
// back. A fresh channel with a local subchannel pool connects on its first
// call, so re-attaching works as soon as the restarted daemon serves.
// The daemon names its segment socket; it lies beside the gRPC socket. The
// directory is taken from our own socket path, so a rank in a container
// that mounts the daemon's directory elsewhere still finds it.
std::string SegmentSocket(const std::string& socket_path, const std::string& announced) {
  const size_t slash = announced.rfind('/');
  const std::string name = slash == std::string::npos ? announced : announced.substr(slash + 1);
  const size_t dir = socket_path.rfind('/');
  return dir == std::string::npos ? name : socket_path.substr(0, dir + 1) + name;
}

std::shared_ptr<v1::NodeService::Stub> NewStub(const std::string& socket_path) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::NodeService::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("unix:", socket_path), grpc::InsecureChannelCredentials(), args));
}

// What one Attach gave: the session, the channel it lives on and the pool
// mapped for it.
struct Attachment {
  std::shared_ptr<v1::NodeService::Stub> stub;
  std::string session;
  std::string segment_socket;
  std::unique_ptr<PoolMapping> pool;
  std::chrono::milliseconds max_wait{0};
  // Set when the daemon ended the session's Watch stream (it died, restarted
  // or shuts down): the next Save or Load attaches again.
  std::shared_ptr<std::atomic<bool>> gone = std::make_shared<std::atomic<bool>>(false);
};

class ClientImpl final : public Client {
 public:
  explicit ClientImpl(ClientOptions options)
      : options_(std::move(options)), copies_(options_.copy_threads) {}

  absl::Status AttachFirst() {
    absl::MutexLock lock(&attach_mu_);
    return AttachNow();
  }

  // Attaches and starts the Watch stream that tells the daemon we are alive.
  absl::Status AttachNow() ABSL_EXCLUSIVE_LOCKS_REQUIRED(attach_mu_) {
    const std::string target = absl::StrCat("unix:", options_.socket_path);
    v1::AttachRequest request;
    request.set_job(options_.job);
    request.set_rank(options_.rank);
    request.set_world_size(options_.world_size);
    request.set_local_rank(options_.local_rank);
    request.set_local_world_size(options_.local_world_size);
    v1::AttachResponse response;
    std::shared_ptr<v1::NodeService::Stub> stub;
    // A fresh connection to a live daemon is now and then closed while it
    // is being made ("Socket closed"; CI saw it twice in a few hundred
    // attaches): a new channel tries again at once, where the old one
    // would back off for a second. A daemon that is not there fails every
    // try, within a few hundred milliseconds.
    grpc::Status attached;
    for (int attempt = 0; attempt < kAttachAttempts; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(attempt * kAttachRetryPause);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + kAttachTimeout);
      stub = NewStub(options_.socket_path);
      attached = stub->Attach(&context, request, &response);
      if (attached.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    }
    if (absl::Status s = FromGrpcStatus(attached); !s.ok()) {
      return WithContext(s, absl::StrCat("attach to ckptd at ", target));
    }
    absl::StatusOr<std::unique_ptr<PoolMapping>> pool =
        PoolMapping::Open(SegmentSocket(options_.socket_path, response.segment_socket()),
                          response.session_id(), response.pool_bytes());
    if (!pool.ok()) return WithContext(pool.status(), absl::StrCat("attach to ckptd at ", target));
    StopWatch();
    auto attachment = std::make_shared<Attachment>();
    attachment->stub = std::move(stub);
    attachment->session = response.session_id();
    attachment->segment_socket = SegmentSocket(options_.socket_path, response.segment_socket());
    attachment->pool = std::move(*pool);
    attachment->max_wait = std::chrono::milliseconds(response.max_wait_ms());
    {
      absl::MutexLock lock(&gpu_mu_);
      // The previous daemon's pool (a re-attach) is no use any more: unpin
      // it, or every restart of the daemon would leak a pool's worth of
      // pinned registration in this process.
      std::shared_ptr<Attachment> previous = Current();
      if (previous != nullptr) previous->pool->Unpin();
      if (gpu_ != nullptr && gpu_->HasDevice()) attachment->pool->Pin(gpu_.get());
    }
    watch_context_ = std::make_unique<grpc::ClientContext>();
    auto watch_request = std::make_shared<v1::WatchRequest>();
    watch_request->set_session_id(attachment->session);
    watch_thread_ = std::thread([stub = attachment->stub, context = watch_context_.get(),
                                 watch_request, gone = attachment->gone] {
      std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> reader =
          stub->Watch(context, *watch_request);
      v1::WatchEvent event;
      while (reader->Read(&event)) {
      }
      (void)reader->Finish();
      gone->store(true);
    });
    absl::MutexLock lock(&state_mu_);
    attachment_ = std::move(attachment);
    return absl::OkStatus();
  }

  ~ClientImpl() override {
    {
      absl::MutexLock lock(&queue_mu_);
      stopping_ = true;
    }
    if (worker_.joinable()) worker_.join();
    if (persister_.joinable()) persister_.join();
    std::shared_ptr<Attachment> attachment = Current();
    // Before gpu_ goes (members die after this body).
    if (attachment != nullptr) attachment->pool->Unpin();
    if (attachment != nullptr && !attachment->gone->load()) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      v1::DetachRequest request;
      request.set_session_id(attachment->session);
      v1::DetachResponse response;
      (void)attachment->stub->Detach(&context, request, &response);
    }
    absl::MutexLock lock(&attach_mu_);
    StopWatch();
  }

  absl::StatusOr<std::shared_ptr<SaveHandle>> Save(int64_t step, std::vector<HostTensor> tensors,
                                                   std::vector<SaveObject> objects,
                                                   SaveOptions options) override {
    if (step < 0) return absl::InvalidArgumentError(absl::StrCat("step ", step, " is negative"));
    if (absl::Status s = EnsureAttached(); !s.ok()) {
      return WithContext(s, absl::StrCat("save of job ", options_.job, " step ", step, " by rank ",
                                         options_.rank));
    }
    auto job = std::make_unique<SaveJob>();
    job->exports.resize(tensors.size());
    bool on_gpu = false;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const HostTensor& t = tensors[i];
      if (t.data == nullptr) {
        // An empty region (an uneven last shard) has no memory to point at.
        v1::TensorShard shard;
        ToProto(t, &shard);
        if (ShardBytes(shard) > 0) {
          return absl::InvalidArgumentError(absl::StrCat("tensor ", t.fqn, " has no data"));
        }
      }
      if (t.location != Location::kCudaDevice || EmptyShard(t)) continue;
      on_gpu = true;
      absl::StatusOr<gpu::DeviceRuntime*> gpu = Gpu(t.fqn);
      if (!gpu.ok()) return gpu.status();
      if (options_.gpu_transfer == ClientOptions::GpuTransfer::kPull) {
        absl::StatusOr<gpu::IpcExport> exported = (*gpu)->ExportIpcHandle(t.data);
        if (!exported.ok()) return WithContext(exported.status(), absl::StrCat("tensor ", t.fqn));
        job->exports[i] = std::move(*exported);
      }
    }
    if (on_gpu && options_.gpu_transfer == ClientOptions::GpuTransfer::kPull) {
      // Ordered after the work already queued on the trainer's stream.
      absl::StatusOr<gpu::DeviceRuntime*> gpu = Gpu("(stream)");
      if (!gpu.ok()) return gpu.status();
      absl::StatusOr<gpu::IpcEvent> ready = (*gpu)->RecordIpcEvent(options.cuda_stream);
      if (!ready.ok()) return WithContext(ready.status(), absl::StrCat("save of step ", step));
      job->ready = std::move(*ready);
    }
    auto state = std::make_shared<SaveState>(step);
    job->state = state;
    job->step = step;
    job->tensors = std::move(tensors);
    job->objects = std::move(objects);
    job->options = options;
    {
      absl::MutexLock lock(&queue_mu_);
      if (!worker_.joinable()) {
        worker_ = std::thread([this] { WorkLoop(); });
        persister_ = std::thread([this] { PersistLoop(); });
      }
      saves_.push_back(std::move(job));
    }
    if (options.blocking) {
      if (absl::Status s = state->WaitSnapshot(); !s.ok()) return s;
    }
    return std::shared_ptr<SaveHandle>(state);
  }

  absl::StatusOr<CheckpointContents> Describe(int64_t step) override {
    const std::string what =
        absl::StrCat("contents of job ", options_.job, " step ",
                     step == kLatestStep ? std::string("latest") : absl::StrCat(step));
    if (absl::Status s = EnsureAttached(); !s.ok()) return WithContext(s, what);
    std::shared_ptr<Attachment> attachment = Current();
    v1::InspectCheckpointRequest request;
    request.set_job(options_.job);
    request.set_step(step);
    v1::InspectCheckpointResponse response;
    grpc::ClientContext context;
    SetDeadline(context, *attachment);
    absl::Status s =
        FromDaemon(*attachment, attachment->stub->InspectCheckpoint(&context, request, &response));
    if (!s.ok()) return WithContext(s, what);
    const v1::CheckpointManifest& manifest = response.manifest();
    CheckpointContents contents;
    contents.step = manifest.step();
    contents.tensors.reserve(manifest.tensors_size());
    for (const v1::TensorEntry& entry : manifest.tensors()) {
      CheckpointContents::Tensor& t = contents.tensors.emplace_back();
      t.fqn = entry.fqn();
      t.dtype = static_cast<DType>(entry.dtype());
      t.global_shape.assign(entry.global_shape().begin(), entry.global_shape().end());
      t.partial = entry.partial();
    }
    contents.objects.reserve(manifest.objects_size());
    for (const v1::ObjectEntry& entry : manifest.objects()) {
      contents.objects.push_back({entry.key(), entry.rank()});
    }
    return contents;
  }

  using Client::Load;
  absl::StatusOr<LoadResult> Load(int64_t step, const std::vector<HostTensor>& tensors,
                                  const std::vector<LoadObject>& objects,
                                  const LoadOptions& options) override {
    const std::string what =
        absl::StrCat("load of job ", options_.job, " step ",
                     step == kLatestStep ? std::string("latest") : absl::StrCat(step), " by rank ",
                     options_.rank);
    if (absl::Status s = EnsureAttached(); !s.ok()) return WithContext(s, what);
    std::shared_ptr<Attachment> attachment = Current();
    v1::NodeService::Stub& stub = *attachment->stub;
    v1::LoadRequest request;
    request.set_session_id(attachment->session);
    request.set_step(step);
    request.set_tier(options.from == LoadOptions::From::kMemory    ? v1::LOAD_TIER_MEMORY
                     : options.from == LoadOptions::From::kDurable ? v1::LOAD_TIER_DURABLE
                                                                   : v1::LOAD_TIER_ANY);
    LoadResult result;
    std::vector<uint64_t> expected;
    const bool pull = options_.gpu_transfer == ClientOptions::GpuTransfer::kPull;
    for (const HostTensor& t : tensors) {
      std::optional<gpu::IpcExport> exported;
      // An empty tensor (PyTorch gives it no device memory) has nothing to map.
      if (t.location == Location::kCudaDevice && !EmptyShard(t)) {
        absl::StatusOr<gpu::DeviceRuntime*> gpu = Gpu(t.fqn);
        if (!gpu.ok()) return WithContext(gpu.status(), what);
        if (pull) {
          absl::StatusOr<gpu::IpcExport> e = (*gpu)->ExportIpcHandle(t.data);
          if (!e.ok()) return WithContext(e.status(), absl::StrCat(what, ": tensor ", t.fqn));
          exported = std::move(*e);
        }
      }
      ToProto(t, request.add_tensors(), exported ? &*exported : nullptr);
      absl::StatusOr<ShardGeometry> g = ValidateShard(request.tensors(request.tensors_size() - 1));
      if (!g.ok()) return WithContext(g.status(), what);
      if (t.data == nullptr && g->bytes > 0) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": tensor ", t.fqn, " has no data"));
      }
      expected.push_back(static_cast<uint64_t>(g->bytes));
    }
    for (const LoadObject& o : objects) {
      if (o.out == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": object ", o.key, " has no output"));
      }
      request.add_object_keys(o.key);
    }
    v1::LoadResponse response;
    {
      grpc::ClientContext context;
      SetDeadline(context, *attachment);
      absl::Status s = FromDaemon(*attachment, stub.Load(&context, request, &response));
      if (!s.ok()) return WithContext(s, what);
    }
    if (response.object_bytes_size() != static_cast<int>(objects.size())) {
      return absl::InternalError(absl::StrCat(what, ": daemon answered for ",
                                              response.object_bytes_size(), " objects, not ",
                                              objects.size()));
    }
    for (size_t i = 0; i < objects.size(); ++i) {
      if (response.object_bytes(static_cast<int>(i)) > (1ull << 40)) {
        return absl::InternalError(
            absl::StrCat(what, ": object ", objects[i].key, " is too large"));
      }
      objects[i].out->assign(response.object_bytes(static_cast<int>(i)), '\0');
    }
    // A load from the daemon's memory tier: the files it reads, mapped
    // read-only for the load, copied from where they lie.
    std::unique_ptr<PoolMapping> memory;
    if (response.memory_bytes() > 0) {
      absl::StatusOr<std::unique_ptr<PoolMapping>> mapped =
          PoolMapping::Open(attachment->segment_socket,
                            segments::LoadSpaceRequest(attachment->session, response.load_id()),
                            response.memory_bytes(), PoolMapping::Access::kReadOnly);
      if (!mapped.ok()) return WithContext(mapped.status(), absl::StrCat(what, ": memory tier"));
      memory = *std::move(mapped);
    }
    // Batch by batch: copy out of the pool while the daemon reads ahead.
    // once(done): releases batch `done` (0: none) and returns the next one,
    // or an empty one while it is not ready; ask(done): until it is.
    auto once = [&](uint64_t done) -> absl::StatusOr<v1::LoadBatch> {
      grpc::ClientContext context;
      SetDeadline(context, *attachment);
      v1::NextLoadBatchRequest next;
      next.set_session_id(attachment->session);
      next.set_load_id(response.load_id());
      next.set_done_batch_id(done);
      v1::LoadBatch batch;
      absl::Status asked = FromDaemon(*attachment, stub.NextLoadBatch(&context, next, &batch));
      if (!asked.ok()) return WithContext(asked, what);
      return batch;
    };
    auto ask = [&](uint64_t done) -> absl::StatusOr<v1::LoadBatch> {
      for (;;) {
        absl::StatusOr<v1::LoadBatch> batch = once(done);
        if (!batch.ok() || batch->batch_id() != 0 || batch->last()) return batch;
        done = 0;  // released: not ready yet
      }
    };
    uint64_t copied = 0;        // a batch copied and not released yet
    uint64_t device_bytes = 0;  // ckptd's own copies to this rank's GPU
    std::vector<CopyPiece> host;
    absl::StatusOr<v1::LoadBatch> asked = ask(0);
    for (;;) {
      if (!asked.ok()) return asked.status();
      v1::LoadBatch batch = *std::move(asked);
      if (batch.last()) {
        result.tiers.assign(batch.tiers().begin(), batch.tiers().end());
        result.fallback_chunks = batch.fallback_chunks();
        result.sources.clear();
        for (const v1::LoadSource& s : batch.sources()) {
          result.sources.push_back({s.kind(), s.host(), s.bytes()});
        }
        device_bytes = batch.device_bytes();
      }
      if (batch.batch_id() == 0) break;  // last, nothing in it
      if (absl::Status s = attachment->pool->Refresh(batch.segment_epoch()); !s.ok()) {
        return WithContext(s, what);
      }
      host.clear();
      for (const v1::Delivery& d : batch.deliveries()) {
        const uint64_t count = std::max<uint64_t>(d.count(), 1);
        char* dest_base = nullptr;
        uint64_t dest_size = 0;
        bool to_device = false;
        if (d.target() == v1::Delivery::OBJECT) {
          if (d.request() >= objects.size()) return BadDelivery(what);
          dest_base = objects[d.request()].out->data();
          dest_size = objects[d.request()].out->size();
        } else {
          if (d.request() >= tensors.size()) return BadDelivery(what);
          dest_base = static_cast<char*>(tensors[d.request()].data);
          dest_size = expected[d.request()];
          to_device = tensors[d.request()].location == Location::kCudaDevice;
        }
        // The whole strided source span is checked once (a column of a tall
        // tensor is one delivery of many runs), then each run inside it.
        if (count > 1 && d.src_stride() > (UINT64_MAX - d.length()) / (count - 1)) {
          return BadDelivery(what);
        }
        const uint64_t span = (count - 1) * d.src_stride() + d.length();
        const PoolMapping* from = d.from_memory() ? memory.get() : attachment->pool.get();
        if (from == nullptr) return BadDelivery(what);
        absl::StatusOr<char*> source = from->Range(d.pool_offset(), span);
        if (!source.ok()) return BadDelivery(what);
        result.bytes += count * d.length();
        for (uint64_t i = 0; i < count; ++i) {
          const uint64_t dst = d.dest_offset() + i * d.dest_stride();
          const char* from = *source + i * d.src_stride();
          if (dst > dest_size || d.length() > dest_size - dst) return BadDelivery(what);
          if (to_device) {
            // Push: this process copies into its own GPU memory.
            absl::StatusOr<gpu::DeviceRuntime*> gpu = Gpu(tensors[d.request()].fqn);
            absl::Status s = gpu.ok() ? (*gpu)->CopyHostToDevice(from, dest_base + dst, d.length())
                                      : gpu.status();
            if (!s.ok()) return WithContext(s, what);
            continue;
          }
          host.push_back({dest_base + dst, from, d.length()});
        }
      }
      // A batch read in place holds no pool room: the next one is asked
      // for (releasing the one before) while this one is copied, so the
      // round trip does not wait on the copy. Otherwise the one before is
      // released first: the daemon hands out a second batch only beside a
      // roomless one.
      const bool ahead = batch.roomless() && !batch.last();
      if (!ahead && copied != 0) {
        absl::StatusOr<v1::LoadBatch> released = once(copied);
        if (!released.ok()) return released.status();
        copied = 0;
        if (released->batch_id() != 0) return BadDelivery(what);  // it must wait for this one
      }
      copies_.Start(std::move(host));
      // The copy threads copy; this one asks meanwhile (a thread started
      // per batch cost more than the round trip).
      if (ahead) {
        asked = ask(copied);
        copied = 0;
      }
      copies_.Wait();
      host = {};
      if (ahead) {
        copied = batch.batch_id();
        continue;
      }
      if (batch.last()) {
        // Release the last batch too.
        absl::StatusOr<v1::LoadBatch> released = ask(batch.batch_id());
        if (!released.ok()) return released.status();
        break;
      }
      asked = ask(batch.batch_id());
    }
    result.step = response.step();
    result.bytes += device_bytes;
    if (result.tiers.empty()) result.tiers.push_back(response.tier());
    return result;
  }

 private:
  static absl::Status BadDelivery(const std::string& what) {
    return absl::InternalError(
        absl::StrCat(what, ": daemon sent a copy outside the pool or the buffer"));
  }

  std::shared_ptr<Attachment> Current() {
    absl::MutexLock lock(&state_mu_);
    return attachment_;
  }

  void StopWatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(attach_mu_) {
    if (watch_context_) watch_context_->TryCancel();
    if (watch_thread_.joinable()) watch_thread_.join();
    watch_context_.reset();
  }

  // A call's outcome as a status. UNAVAILABLE means the daemon is gone
  // (died, restarting, shutting down): the error names it (gRPC's own says
  // only "Broken pipe" or "Connection refused"), and the next Save or Load
  // attaches again without waiting for the Watch stream's end, which another
  // thread notices a little later.
  absl::Status FromDaemon(const Attachment& attachment, const grpc::Status& status) const {
    absl::Status s = FromGrpcStatus(status);
    if (!absl::IsUnavailable(s)) return s;
    attachment.gone->store(true);
    return WithContext(s, absl::StrCat("ckptd at unix:", options_.socket_path));
  }

  // Attaches again when the daemon ended our session (it restarted).
  absl::Status EnsureAttached() {
    absl::MutexLock lock(&attach_mu_);
    std::shared_ptr<Attachment> attachment = Current();
    if (attachment != nullptr && !attachment->gone->load()) return absl::OkStatus();
    return AttachNow();
  }

  void SetDeadline(grpc::ClientContext& context, const Attachment& attachment) {
    // Beyond the longest wait the daemon imposes, so its own error arrives
    // first; a daemon that stops answering is still noticed.
    context.set_deadline(std::chrono::system_clock::now() + attachment.max_wait +
                         std::chrono::seconds(30));
  }

  void WorkLoop() {
    // Asks for each save's next batch; one thread for the worker's life.
    AheadCall<v1::SaveBatch> ahead;
    for (;;) {
      std::unique_ptr<SaveJob> job;
      {
        absl::MutexLock lock(&queue_mu_);
        queue_mu_.Await(absl::Condition(
            +[](ClientImpl* c)
                 ABSL_NO_THREAD_SAFETY_ANALYSIS { return c->stopping_ || !c->saves_.empty(); },
            this));
        if (saves_.empty()) {
          persist_stop_ = true;
          return;
        }
        job = std::move(saves_.front());
        saves_.pop_front();
      }
      std::optional<std::pair<std::string, std::string>> wait = RunSnapshot(*job, ahead);
      absl::MutexLock lock(&queue_mu_);
      if (wait.has_value()) {
        persists_.push_back({job->state, job->step, wait->first, wait->second});
      }
    }
  }

  void PersistLoop() {
    for (;;) {
      Persist item;
      {
        absl::MutexLock lock(&queue_mu_);
        queue_mu_.Await(absl::Condition(
            +[](ClientImpl* c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return c->persist_stop_ || !c->persists_.empty();
            },
            this));
        if (persists_.empty()) return;
        item = std::move(persists_.front());
        persists_.pop_front();
      }
      const std::string what = absl::StrCat("save of job ", options_.job, " step ", item.step,
                                            " by rank ", options_.rank);
      std::shared_ptr<Attachment> attachment = Current();
      v1::NodeService::Stub& stub = *attachment->stub;
      for (;;) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(40));
        v1::WaitSaveRequest wait;
        wait.set_session_id(item.session);
        wait.set_save_id(item.save_id);
        wait.set_timeout_ms(10000);
        v1::WaitSaveResponse waited;
        absl::Status s = FromDaemon(*attachment, stub.WaitSave(&context, wait, &waited));
        if (!s.ok()) {
          item.state->PersistDone(WithContext(s, what));
          break;
        }
        if (waited.done()) {
          item.state->PersistDone(absl::OkStatus());
          break;
        }
      }
    }
  }

  // Plans and copies one save, asking for its batches ahead on `ahead`;
  // returns (session, save id) to wait on, or nullopt once the handle has
  // its error.
  std::optional<std::pair<std::string, std::string>> RunSnapshot(SaveJob& job,
                                                                 AheadCall<v1::SaveBatch>& ahead) {
    SaveState& state = *job.state;
    const std::string what =
        absl::StrCat("save of job ", options_.job, " step ", job.step, " by rank ", options_.rank);
    auto fail = [&](const absl::Status& s) {
      state.PersistDone(WithContext(s, what));
      return std::nullopt;
    };
    if (absl::Status s = EnsureAttached(); !s.ok()) return fail(s);
    std::shared_ptr<Attachment> attachment = Current();
    v1::NodeService::Stub& stub = *attachment->stub;
    v1::PlanSaveRequest plan;
    plan.set_session_id(attachment->session);
    plan.set_step(job.step);
    plan.set_partial(job.options.partial);
    plan.set_codec(job.options.codec);
    plan.set_delta_every(job.options.delta_every);
    plan.set_tier(job.options.tier == Tier::kMemory             ? v1::SAVE_TIER_MEMORY
                  : job.options.tier == Tier::kMemoryAndDurable ? v1::SAVE_TIER_MEMORY_AND_DURABLE
                                                                : v1::SAVE_TIER_DURABLE);
    for (const auto& [k, v] : job.options.user_metadata) (*plan.mutable_user_metadata())[k] = v;
    for (size_t i = 0; i < job.tensors.size(); ++i) {
      ToProto(job.tensors[i], plan.add_shards(), job.exports[i] ? &*job.exports[i] : nullptr);
    }
    for (const SaveObject& o : job.objects) {
      v1::ObjectDesc* desc = plan.add_objects();
      desc->set_key(o.key);
      desc->set_global(o.global);
      desc->set_length(o.bytes.size());
    }
    if (job.ready.has_value()) {
      plan.set_ready_event(job.ready->handle);
      plan.set_ready_event_device(job.ready->device);
    }
    v1::PlanSaveResponse planned;
    {
      grpc::ClientContext context;
      SetDeadline(context, *attachment);
      absl::Status s = FromDaemon(*attachment, stub.PlanSave(&context, plan, &planned));
      if (!s.ok()) return fail(s);
    }
    std::vector<uint64_t> shard_bytes;
    for (const v1::TensorShard& shard : plan.shards()) shard_bytes.push_back(ShardBytes(shard));
    bool pushed_sync = false;
    auto next_batch = [&]() -> absl::StatusOr<v1::SaveBatch> {
      grpc::ClientContext context;
      SetDeadline(context, *attachment);
      v1::NextSaveBatchRequest request;
      request.set_session_id(attachment->session);
      request.set_save_id(planned.save_id());
      v1::SaveBatch batch;
      absl::Status s = FromDaemon(*attachment, stub.NextSaveBatch(&context, request, &batch));
      if (!s.ok()) return s;
      return batch;
    };
    // Whichever way this save ends, a request still asking ends first: it
    // reads this frame.
    absl::Cleanup settle = [&] { ahead.Settle(); };
    absl::StatusOr<v1::SaveBatch> first = next_batch();
    if (!first.ok()) return fail(first.status());
    v1::SaveBatch batch = *std::move(first);
    for (;;) {
      // Copy this batch on the copy threads while asking for the next one.
      if (absl::Status s = attachment->pool->Refresh(batch.segment_epoch()); !s.ok()) {
        return fail(s);
      }
      std::vector<CopyPiece> pieces;
      for (const v1::BatchSlice& slice : batch.slices()) {
        if (slice.pull()) continue;  // the daemon copies it from the GPU
        absl::StatusOr<char*> dst = attachment->pool->Range(slice.pool_offset(), slice.length());
        const char* src = nullptr;
        uint64_t size = 0;
        bool device = false;
        if (slice.kind() == v1::SaveItem::OBJECT && slice.index() < job.objects.size()) {
          src = job.objects[slice.index()].bytes.data();
          size = job.objects[slice.index()].bytes.size();
        } else if (slice.kind() == v1::SaveItem::SHARD && slice.index() < job.tensors.size()) {
          src = static_cast<const char*>(job.tensors[slice.index()].data);
          size = shard_bytes[slice.index()];
          device = job.tensors[slice.index()].location == Location::kCudaDevice;
        }
        if (!dst.ok() || src == nullptr || slice.item_offset() > size ||
            slice.length() > size - slice.item_offset()) {
          copies_.Wait();
          return fail(absl::InternalError(
              absl::StrCat("daemon handed out a slice outside the pool or the item (", slice.kind(),
                           " ", slice.index(), ")")));
        }
        if (device) {
          // Push: device to the pinned pool, in this process, after the
          // work queued on the trainer's stream.
          absl::StatusOr<gpu::DeviceRuntime*> gpu = Gpu(job.tensors[slice.index()].fqn);
          absl::Status s = gpu.status();
          if (s.ok() && !pushed_sync) s = (*gpu)->SynchronizeStream(job.options.cuda_stream);
          pushed_sync = true;
          if (s.ok()) {
            s = (*gpu)->CopyDeviceToHost(src + slice.item_offset(), *dst, slice.length(),
                                         std::max<uint64_t>(planned.chunk_bytes(), 1),
                                         [](uint64_t, uint64_t) {});
          }
          if (!s.ok()) return fail(s);
          continue;
        }
        pieces.push_back({*dst, src + slice.item_offset(), slice.length()});
      }
      copies_.Start(std::move(pieces));
      // The next batch is asked for while this one is copied and submitted,
      // not before it is submitted: its room may have to wait for this
      // one's to be written, and ranks that each held a room unsubmitted
      // while waiting for another would wedge a pool of one room per rank.
      // So another thread asks (one for the worker's life). A load asks on
      // its own thread: its next batch never waits on what that thread
      // does next.
      if (!batch.last()) ahead.Start(next_batch);
      copies_.Wait();
      {
        grpc::ClientContext context;
        SetDeadline(context, *attachment);
        v1::SubmitSnapshotRequest submit;
        submit.set_session_id(attachment->session);
        submit.set_save_id(planned.save_id());
        submit.set_batch_id(batch.batch_id());
        v1::SubmitSnapshotResponse submitted;
        absl::Status s = FromDaemon(*attachment, stub.SubmitSnapshot(&context, submit, &submitted));
        if (!s.ok()) return fail(s);
      }
      if (batch.last()) break;
      absl::StatusOr<v1::SaveBatch> following = ahead.Take();
      if (!following.ok()) return fail(following.status());
      batch = *std::move(following);
    }
    state.SnapshotDone(absl::OkStatus());
    return std::make_pair(attachment->session, planned.save_id());
  }

  // A tensor or region of no bytes: nothing to copy, on a GPU or not.
  static bool EmptyShard(const HostTensor& t) {
    v1::TensorShard shard;
    ToProto(t, &shard);
    return ShardBytes(shard) == 0;
  }

  static uint64_t ShardBytes(const v1::TensorShard& shard) {
    absl::StatusOr<ShardGeometry> g = ValidateShard(shard);
    return g.ok() ? static_cast<uint64_t>(g->bytes) : 0;
  }

  // The GPU runtime, detected on first use so host-only trainers never
  // initialise CUDA. An error names the tensor and why there is no GPU.
  absl::StatusOr<gpu::DeviceRuntime*> Gpu(const std::string& fqn) {
    absl::MutexLock lock(&gpu_mu_);
    if (gpu_ == nullptr) {
      gpu_ = gpu::DetectDeviceRuntime();
      std::shared_ptr<Attachment> attachment = Current();
      // Pinned, so pushes from the GPU into the pool run at DMA speed.
      if (gpu_->HasDevice() && attachment != nullptr) attachment->pool->Pin(gpu_.get());
    }
    if (!gpu_->HasDevice()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor ", fqn, " is in GPU memory but this process has ", gpu_->Describe()));
    }
    return gpu_.get();
  }

  struct Persist {
    std::shared_ptr<SaveState> state;
    int64_t step = 0;
    std::string session;
    std::string save_id;
  };

  const ClientOptions options_;
  client::CopyPool copies_;

  absl::Mutex attach_mu_;  // serialises (re-)attaching
  std::unique_ptr<grpc::ClientContext> watch_context_ ABSL_GUARDED_BY(attach_mu_);
  std::thread watch_thread_ ABSL_GUARDED_BY(attach_mu_);
  absl::Mutex state_mu_;
  std::shared_ptr<Attachment> attachment_ ABSL_GUARDED_BY(state_mu_);

  absl::Mutex gpu_mu_;
  std::unique_ptr<gpu::DeviceRuntime> gpu_ ABSL_GUARDED_BY(gpu_mu_);

  absl::Mutex queue_mu_;
  std::deque<std::unique_ptr<SaveJob>> saves_ ABSL_GUARDED_BY(queue_mu_);
  std::deque<Persist> persists_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool persist_stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread worker_;
  std::thread persister_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Attach(const ClientOptions& options) {
  auto client = std::make_unique<ClientImpl>(options);
  if (absl::Status s = client->AttachFirst(); !s.ok()) return s;
  return std::unique_ptr<Client>(std::move(client));
}

}  // namespace ckpt
