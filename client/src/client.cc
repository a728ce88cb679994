#include "ckpt/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"
#include "absl/synchronization/mutex.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "client/src/parallel_copy.h"
#include "daemon/gpu/device_factory.h"
#include "daemon/gpu/device_runtime.h"
#include "client/src/pool_mapping.h"
#include "proto/lib/grpc_status.h"
#include "proto/lib/region_convert.h"

namespace ckpt {
namespace {

using client::CopyPiece;
using client::PoolMapping;

constexpr int kMaxMessageBytes = 256 << 20;
constexpr auto kAttachTimeout = std::chrono::seconds(30);

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
    case Region::Kind::kWhole: region = geo::Region::Whole(); break;
    case Region::Kind::kBox: region = geo::Region::Box(t.region.offsets, t.region.lengths); break;
    case Region::Kind::kFlat: region = geo::Region::Flat(t.region.flat_begin, t.region.flat_end); break;
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

// Sends a save's SubmitSnapshot requests in order on its own thread. The
// last request (more = false) or nullopt ends it; the first error stops it.
class SnapshotSubmitter {
 public:
  SnapshotSubmitter(v1::NodeService::Stub& stub, std::string session, std::string save_id)
      : stub_(stub), session_(std::move(session)), save_id_(std::move(save_id)),
        thread_([this] { Run(); }) {}
  ~SnapshotSubmitter() {
    Push(std::nullopt);
    if (thread_.joinable()) thread_.join();
  }

  void Push(std::optional<v1::SubmitSnapshotRequest> request) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(request));
  }
  bool failed() {
    absl::MutexLock lock(&mu_);
    return !status_.ok();
  }
  // Waits for every pushed request; the first error, if any.
  absl::Status Finish() {
    thread_.join();
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  void Run() {
    for (;;) {
      std::optional<v1::SubmitSnapshotRequest> request;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::deque<std::optional<v1::SubmitSnapshotRequest>>* q) { return !q->empty(); },
            &queue_));
        request = std::move(queue_.front());
        queue_.pop_front();
        if (!request.has_value() || !status_.ok()) return;
      }
      request->set_session_id(session_);
      request->set_save_id(save_id_);
      grpc::ClientContext context;
      v1::SubmitSnapshotResponse response;
      absl::Status s = FromGrpcStatus(stub_.SubmitSnapshot(&context, *request, &response));
      absl::MutexLock lock(&mu_);
      status_.Update(s);
      if (!request->more() || !status_.ok()) return;
    }
  }

  v1::NodeService::Stub& stub_;
  const std::string session_;
  const std::string save_id_;
  absl::Mutex mu_;
  std::deque<std::optional<v1::SubmitSnapshotRequest>> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

class ClientImpl final : public Client {
 public:
  ClientImpl(ClientOptions options, std::unique_ptr<v1::NodeService::Stub> stub,
             std::string session, std::unique_ptr<PoolMapping> pool)
      : options_(std::move(options)),
        stub_(std::move(stub)),
        session_(std::move(session)),
        pool_(std::move(pool)) {}

  ~ClientImpl() override {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
    {
      absl::MutexLock lock(&gpu_mu_);
      if (pool_pinned_) (void)gpu_->UnregisterHostMemory(pool_->base());
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::DetachRequest request;
    request.set_session_id(session_);
    v1::DetachResponse response;
    (void)stub_->Detach(&context, request, &response);
  }

  absl::StatusOr<std::shared_ptr<SaveHandle>> Save(int64_t step, std::vector<HostTensor> tensors,
                                                   std::vector<SaveObject> objects,
                                                   SaveOptions options) override {
    if (step < 0) return absl::InvalidArgumentError(absl::StrCat("step ", step, " is negative"));
    std::vector<std::optional<gpu::IpcExport>> exports(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const HostTensor& t = tensors[i];
      if (t.data == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", t.fqn, " has no data"));
      }
      if (t.location != Location::kCudaDevice) continue;
      absl::StatusOr<gpu::DeviceRuntime*> gpu = Gpu(t.fqn);
      if (!gpu.ok()) return gpu.status();
      if (options_.gpu_transfer == ClientOptions::GpuTransfer::kPull) {
        absl::StatusOr<gpu::IpcExport> exported = (*gpu)->ExportIpcHandle(t.data);
        if (!exported.ok()) {
          return absl::Status(exported.status().code(),
                              absl::StrCat("tensor ", t.fqn, ": ", exported.status().message()));
        }
        exports[i] = std::move(*exported);
      }
    }
    auto state = std::make_shared<SaveState>(step);
    std::thread worker([this, state, step, tensors = std::move(tensors),
                        objects = std::move(objects), exports = std::move(exports),
                        options]() mutable {
      RunSave(*state, step, tensors, exports, objects, options);
    });
    {
      absl::MutexLock lock(&mu_);
      threads_.push_back(std::move(worker));
    }
    if (options.blocking) {
      if (absl::Status s = state->WaitSnapshot(); !s.ok()) return s;
    }
    return std::shared_ptr<SaveHandle>(state);
  }

  absl::StatusOr<int64_t> Load(int64_t step, const std::vector<HostTensor>& tensors,
                               const std::vector<LoadObject>& objects) override {
    const std::string what = absl::StrCat("load of job ", options_.job, " step ",
                                          step == kLatestStep ? std::string("latest")
                                                              : absl::StrCat(step),
                                          " by rank ", options_.rank, ": ");
    v1::LoadRequest request;
    request.set_session_id(session_);
    request.set_step(step);
    std::vector<int64_t> expected;
    const bool pull = options_.gpu_transfer == ClientOptions::GpuTransfer::kPull;
    for (const HostTensor& t : tensors) {
      std::optional<gpu::IpcExport> exported;
      if (t.location == Location::kCudaDevice) {
        absl::StatusOr<gpu::DeviceRuntime*> gpu = Gpu(t.fqn);
        if (!gpu.ok()) return Prefixed(gpu.status(), what);
        if (pull) {
          absl::StatusOr<gpu::IpcExport> e = (*gpu)->ExportIpcHandle(t.data);
          if (!e.ok()) return Prefixed(e.status(), absl::StrCat(what, "tensor ", t.fqn, ": "));
          exported = std::move(*e);
        }
      }
      ToProto(t, request.add_tensors(), exported ? &*exported : nullptr);
      absl::StatusOr<ShardGeometry> g = ValidateShard(request.tensors(request.tensors_size() - 1));
      if (!g.ok()) return Prefixed(g.status(), what);
      if (t.data == nullptr && g->bytes > 0) {
        return absl::InvalidArgumentError(absl::StrCat(what, "tensor ", t.fqn, " has no data"));
      }
      expected.push_back(g->bytes);
    }
    for (const LoadObject& o : objects) {
      if (o.out == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(what, "object ", o.key, " has no output"));
      }
      request.add_object_keys(o.key);
    }
    grpc::ClientContext context;
    v1::LoadResponse response;
    if (absl::Status s = FromGrpcStatus(stub_->Load(&context, request, &response)); !s.ok()) {
      return Prefixed(s, what);
    }
    absl::Status status;
    char* lease = nullptr;
    if (response.lease().length() > 0) {
      absl::StatusOr<char*> range = pool_->Range(response.lease().offset(), response.lease().length());
      if (range.ok()) lease = *range; else status = range.status();
    }
    if (status.ok() && (response.tensors_size() != static_cast<int>(tensors.size()) ||
                        response.objects_size() != static_cast<int>(objects.size()))) {
      status = absl::InternalError("daemon answered a different number of tensors or objects");
    }
    std::vector<CopyPiece> pieces;
    for (size_t i = 0; status.ok() && i < tensors.size(); ++i) {
      const v1::MemoryRef& ref = response.tensors(i);
      if (static_cast<int64_t>(ref.length()) != expected[i] ||
          ref.offset() + ref.length() > response.lease().length()) {
        status = absl::InternalError(absl::StrCat("daemon returned a bad reference for ", tensors[i].fqn));
        break;
      }
      if (ref.length() == 0) continue;
      if (tensors[i].location == Location::kCudaDevice) {
        if (pull) continue;  // the daemon delivered it to the device already
        absl::StatusOr<gpu::DeviceRuntime*> gpu = Gpu(tensors[i].fqn);
        if (gpu.ok()) {
          status = (*gpu)->CopyHostToDevice(lease + ref.offset(), tensors[i].data, ref.length());
        } else {
          status = gpu.status();
        }
        continue;
      }
      pieces.push_back({static_cast<char*>(tensors[i].data), lease + ref.offset(), ref.length()});
    }
    if (status.ok()) {
      client::ParallelCopy(pieces, options_.copy_threads);
      for (size_t i = 0; i < objects.size(); ++i) {
        const v1::MemoryRef& ref = response.objects(i);
        if (ref.offset() + ref.length() > response.lease().length()) {
          status = absl::InternalError(absl::StrCat("daemon returned a bad reference for ", objects[i].key));
          break;
        }
        objects[i].out->assign(lease == nullptr ? "" : std::string(lease + ref.offset(), ref.length()));
      }
    }
    if (response.lease().length() > 0) {
      grpc::ClientContext release_context;
      v1::ReleaseLeaseRequest release;
      release.set_session_id(session_);
      release.set_lease_id(response.lease().id());
      v1::ReleaseLeaseResponse released;
      status.Update(FromGrpcStatus(stub_->ReleaseLease(&release_context, release, &released)));
    }
    if (!status.ok()) return Prefixed(status, what);
    return response.step();
  }

 private:
  void RunSave(SaveState& state, int64_t step, const std::vector<HostTensor>& tensors,
               const std::vector<std::optional<gpu::IpcExport>>& exports,
               const std::vector<SaveObject>& objects, const SaveOptions& options) {
    const std::string what = absl::StrCat("save of job ", options_.job, " step ", step,
                                          " by rank ", options_.rank, ": ");
    v1::PlanSaveRequest plan;
    plan.set_session_id(session_);
    plan.set_step(step);
    plan.set_partial(options.partial);
    for (const auto& [k, v] : options.user_metadata) (*plan.mutable_user_metadata())[k] = v;
    for (size_t i = 0; i < tensors.size(); ++i) {
      ToProto(tensors[i], plan.add_shards(), exports[i] ? &*exports[i] : nullptr);
    }
    for (const SaveObject& o : objects) {
      v1::ObjectDesc* desc = plan.add_objects();
      desc->set_key(o.key);
      desc->set_global(o.global);
      desc->set_length(o.bytes.size());
    }
    v1::PlanSaveResponse planned;
    {
      grpc::ClientContext context;
      absl::Status s = FromGrpcStatus(stub_->PlanSave(&context, plan, &planned));
      if (!s.ok()) return state.PersistDone(Prefixed(s, what));
    }
    // Only the items assigned to this rank are copied; replicas are not.
    char* lease = nullptr;
    if (planned.lease().length() > 0) {
      absl::StatusOr<char*> range = pool_->Range(planned.lease().offset(), planned.lease().length());
      if (!range.ok()) return state.PersistDone(Prefixed(range.status(), what));
      lease = *range;
    }
    // Pipelining: copy a batch of whole chunks, hand it to the daemon (which
    // starts writing it), copy the next. A batch is big enough to keep the
    // RPC cost negligible and small enough to start the writers early.
    const uint64_t chunk = std::max<uint64_t>(planned.chunk_bytes(), 1);
    const uint64_t batch_bytes = std::max<uint64_t>(options_.pipeline_bytes / chunk, 1) * chunk;
    // Batches are handed over by a submitter thread, so the RPCs overlap the
    // copying of the next batch instead of adding to the trainer's stall.
    SnapshotSubmitter submitter(*stub_, session_, planned.save_id());
    // Batches are laid out first, then copied by one streaming set of
    // threads; each is submitted as soon as it (and those before) landed.
    std::vector<v1::SubmitSnapshotRequest> requests(1);
    std::vector<std::vector<CopyPiece>> copies(1);
    uint64_t batched = 0;
    auto flush = [&](bool more) {
      requests.back().set_more(more);
      if (more) {
        requests.emplace_back();
        copies.emplace_back();
      }
      batched = 0;
    };
    uint64_t offset = 0;
    for (const v1::SaveItem& item : planned.items()) {
      if (offset + item.padded_bytes() > planned.lease().length()) {
        submitter.Push(std::nullopt);
        return state.PersistDone(absl::InternalError(absl::StrCat(what, "lease too small")));
      }
      const bool on_gpu = item.kind() == v1::SaveItem::SHARD &&
                          tensors.at(item.index()).location == Location::kCudaDevice;
      if (on_gpu && item.bytes() > 0) {
        v1::SnapshotRef* ref = requests.back().add_refs();
        ref->set_kind(item.kind());
        ref->set_index(item.index());
        ref->mutable_memory()->set_offset(offset);
        ref->mutable_memory()->set_length(item.bytes());
        if (exports.at(item.index())) {
          ref->set_pull(true);  // the daemon copies it over CUDA IPC
        } else {
          // Push: device to the pinned pool, in this process.
          absl::StatusOr<gpu::DeviceRuntime*> gpu = Gpu(tensors.at(item.index()).fqn);
          absl::Status s = gpu.ok() ? (*gpu)->CopyDeviceToHost(
                                          tensors.at(item.index()).data, lease + offset,
                                          item.bytes(), chunk, [](uint64_t, uint64_t) {})
                                    : gpu.status();
          if (!s.ok()) {
            submitter.Push(std::nullopt);
            return state.PersistDone(Prefixed(s, what));
          }
        }
        offset += item.padded_bytes();
        continue;
      }
      const char* src = item.kind() == v1::SaveItem::OBJECT
                            ? objects.at(item.index()).bytes.data()
                            : static_cast<const char*>(tensors.at(item.index()).data);
      for (uint64_t at = 0; at < item.bytes();) {
        // A piece that does not end its item must be whole chunks, so a
        // batch another item started only has room for whole chunks.
        uint64_t room = (batch_bytes - batched) / chunk * chunk;
        if (room == 0) {
          flush(/*more=*/true);
          room = batch_bytes;
        }
        // Objects go whole: each is one stored chunk.
        const uint64_t piece = item.kind() == v1::SaveItem::OBJECT
                                   ? item.bytes()
                                   : std::min(item.bytes() - at, room);
        v1::SnapshotRef* ref = requests.back().add_refs();
        ref->set_kind(item.kind());
        ref->set_index(item.index());
        ref->set_item_offset(at);
        ref->mutable_memory()->set_offset(offset + at);
        ref->mutable_memory()->set_length(piece);
        copies.back().push_back({lease + offset + at, src + at, piece});
        at += piece;
        batched += piece;
        if (batched >= batch_bytes) flush(/*more=*/true);
      }
      offset += item.padded_bytes();
    }
    flush(/*more=*/false);
    client::ParallelCopyBatches(copies, options_.copy_threads,
                                [&](size_t k) { submitter.Push(std::move(requests[k])); });
    if (absl::Status s = submitter.Finish(); !s.ok()) return state.PersistDone(Prefixed(s, what));
    state.SnapshotDone(absl::OkStatus());
    grpc::ClientContext context;
    v1::WaitSaveRequest wait;
    wait.set_session_id(session_);
    wait.set_save_id(planned.save_id());
    v1::WaitSaveResponse waited;
    state.PersistDone(Prefixed(FromGrpcStatus(stub_->WaitSave(&context, wait, &waited)), what));
  }

  const ClientOptions options_;
  const std::unique_ptr<v1::NodeService::Stub> stub_;
  const std::string session_;
  // The GPU runtime, detected on first use so host-only trainers never
  // initialise CUDA. An error names the tensor and why there is no GPU.
  absl::StatusOr<gpu::DeviceRuntime*> Gpu(const std::string& fqn) {
    absl::MutexLock lock(&gpu_mu_);
    if (gpu_ == nullptr) {
      gpu_ = gpu::DetectDeviceRuntime();
      if (gpu_->HasDevice()) {
        // Pinned, so pushes from the GPU into the pool run at DMA speed.
        pool_pinned_ = gpu_->RegisterHostMemory(pool_->base(), pool_->size()).ok();
      }
    }
    if (!gpu_->HasDevice()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor ", fqn, " is in GPU memory but this process has ", gpu_->Describe()));
    }
    return gpu_.get();
  }

  const std::unique_ptr<PoolMapping> pool_;
  absl::Mutex gpu_mu_;
  std::unique_ptr<gpu::DeviceRuntime> gpu_ ABSL_GUARDED_BY(gpu_mu_);
  bool pool_pinned_ ABSL_GUARDED_BY(gpu_mu_) = false;
  absl::Mutex mu_;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Attach(const ClientOptions& options) {
  const std::string target = absl::StrCat("unix:", options.socket_path);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  auto stub = v1::NodeService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kAttachTimeout);
  v1::AttachRequest request;
  request.set_job(options.job);
  request.set_rank(options.rank);
  request.set_world_size(options.world_size);
  request.set_local_rank(options.local_rank);
  v1::AttachResponse response;
  if (absl::Status s = FromGrpcStatus(stub->Attach(&context, request, &response)); !s.ok()) {
    return Prefixed(s, absl::StrCat("attach to ckptd at ", target, ": "));
  }
  absl::StatusOr<std::unique_ptr<PoolMapping>> pool =
      PoolMapping::Open(response.pool_path(), response.pool_bytes());
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<Client>(
      new ClientImpl(options, std::move(stub), response.session_id(), std::move(*pool)));
}

}  // namespace ckpt
