// The fast path's ordering guarantees, shown with an in-process ckptd whose
// storage is gated: writes block until the test opens the gate, and the
// gate tells when the first write arrived.
//  - Pipelining: the first chunks are written before the rank has even
//    copied its last chunk.
//  - Pool exhaustion: a second save that does not fit waits (reported as
//    stall) and succeeds once the first drains.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "ckpt/client.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "client/src/pool_mapping.h"
#include "daemon/service/node_daemon.h"
#include "daemon/storage/backend_factory.h"
#include "tests/catch.h"
#include "tools/demo/tensor_pattern.h"

namespace ckpt::testing {
namespace {

// Passes everything to a memory backend, except that data writes wait for
// the gate to open. Thread-safe.
class GatedBackend final : public storage::Backend {
 public:
  explicit GatedBackend(bool open) : inner_(storage::NewMemoryBackend()), open_(open) {}

  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // Blocks until a data write arrived; false after the timeout.
  bool WaitForFirstWrite(absl::Duration timeout) {
    return first_write_.WaitForNotificationWithTimeout(timeout);
  }

  std::string Name() const override { return "gated-memory"; }
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> NewWritableFile(
      const std::string& path) override {
    auto file = inner_->NewWritableFile(path);
    if (!file.ok() || path.find("/data/") == std::string::npos) return file;
    return std::unique_ptr<storage::WritableFile>(new GatedFile(this, std::move(*file)));
  }
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> NewReadableFile(
      const std::string& path) override {
    return inner_->NewReadableFile(path);
  }
  absl::Status CreateDirs(const std::string& p) override { return inner_->CreateDirs(p); }
  absl::Status SyncDir(const std::string& p) override { return inner_->SyncDir(p); }
  absl::Status Rename(const std::string& a, const std::string& b) override {
    return inner_->Rename(a, b);
  }
  absl::Status RemoveAll(const std::string& p) override { return inner_->RemoveAll(p); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& p) override {
    return inner_->ListDir(p);
  }
  absl::StatusOr<bool> Exists(const std::string& p) override { return inner_->Exists(p); }

 private:
  class GatedFile final : public storage::WritableFile {
   public:
    GatedFile(GatedBackend* gate, std::unique_ptr<storage::WritableFile> inner)
        : gate_(gate), inner_(std::move(inner)) {}
    absl::Status WriteAt(uint64_t offset, const void* data, size_t length) override {
      gate_->Pass();
      return inner_->WriteAt(offset, data, length);
    }
    absl::Status WriteBatch(absl::Span<const storage::IoOp> ops) override {
      gate_->Pass();
      return inner_->WriteBatch(ops);
    }
    absl::Status Sync() override { return inner_->Sync(); }
    absl::Status Close() override { return inner_->Close(); }

   private:
    GatedBackend* gate_;
    std::unique_ptr<storage::WritableFile> inner_;
  };

  void Pass() {
    if (!first_write_.HasBeenNotified()) first_write_.Notify();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&open_));
  }

  std::unique_ptr<storage::Backend> inner_;
  absl::Notification first_write_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_);
};

struct InProcessDaemon {
  explicit InProcessDaemon(bool gate_open, uint64_t pool_bytes, uint64_t batch_bytes = 32 << 20) {
    char pattern[] = "/tmp/ckpt-pipe-XXXXXX";
    dir = mkdtemp(pattern);
    session::DaemonOptions o;
    o.storage_root = "/ckpt";
    o.socket_path = dir + "/ckptd.sock";
    o.pool_bytes = pool_bytes;
    o.chunk_bytes = 64 << 10;
    o.batch_bytes = batch_bytes;
    o.save_batch_bytes = batch_bytes;  // exactly these batches, whatever the pool
    o.writer_threads = 1;
    o.host_name = "testhost";
    auto owned = std::make_unique<GatedBackend>(gate_open);
    gate = owned.get();
    auto created = service::NodeDaemon::Create(o, std::move(owned));
    REQUIRE(created.ok());
    daemon = std::move(*created);
    REQUIRE(daemon->Start().ok());
  }
  ~InProcessDaemon() {
    gate->Open();
    daemon.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::unique_ptr<v1::NodeService::Stub> Stub() const {
    return v1::NodeService::NewStub(
        grpc::CreateChannel("unix:" + dir + "/ckptd.sock", grpc::InsecureChannelCredentials()));
  }
  v1::GetStatusResponse Status() const {
    grpc::ClientContext context;
    v1::GetStatusResponse response;
    Stub()->GetStatus(&context, v1::GetStatusRequest(), &response);
    return response;
  }

  std::string dir;
  GatedBackend* gate = nullptr;
  std::unique_ptr<service::NodeDaemon> daemon;
};

HostTensor Weight(int64_t rows, std::vector<char>& storage) {
  HostTensor t;
  t.fqn = "model.w";
  t.dtype = DType::kFloat32;
  t.global_shape = {rows, 1024};
  storage = *PatternShard(t);
  t.data = storage.data();
  return t;
}

}  // namespace

TEST_CASE("writes of the first chunks start before the last chunk is copied", "[pipeline]") {
  // Batches of half the tensor: the first batch is written while the rank
  // has not copied the second.
  InProcessDaemon d(/*gate_open=*/true, 16 << 20, /*batch_bytes=*/512 << 10);
  auto stub = d.Stub();
  grpc::ClientContext attach_context;
  v1::AttachRequest attach;
  attach.set_job("pipe");
  attach.set_world_size(1);
  v1::AttachResponse attached;
  REQUIRE(stub->Attach(&attach_context, attach, &attached).ok());
  auto pool = client::PoolMapping::Open(attached.segment_socket(), attached.session_id(),
                                        attached.pool_bytes());
  REQUIRE(pool.ok());

  std::vector<char> bytes;
  HostTensor weight = Weight(256, bytes);  // 1 MiB: 16 chunks of 64 KiB
  grpc::ClientContext plan_context;
  v1::PlanSaveRequest plan;
  plan.set_session_id(attached.session_id());
  plan.set_step(1);
  v1::TensorShard* shard = plan.add_shards();
  shard->set_fqn(weight.fqn);
  shard->set_dtype(v1::FLOAT32);
  shard->add_global_shape(256);
  shard->add_global_shape(1024);
  v1::PlanSaveResponse planned;
  REQUIRE(stub->PlanSave(&plan_context, plan, &planned).ok());
  REQUIRE(planned.items_size() == 1);
  REQUIRE(planned.chunk_bytes() == 64 << 10);

  // The daemon decides where each slice goes; the rank only copies.
  auto copy_and_submit = [&](bool expect_last) {
    grpc::ClientContext batch_context;
    v1::NextSaveBatchRequest next;
    next.set_session_id(attached.session_id());
    next.set_save_id(planned.save_id());
    v1::SaveBatch batch;
    REQUIRE(stub->NextSaveBatch(&batch_context, next, &batch).ok());
    REQUIRE(batch.slices_size() == 1);
    CHECK(batch.last() == expect_last);
    const v1::BatchSlice& slice = batch.slices(0);
    CHECK(slice.length() == bytes.size() / 2);
    REQUIRE(pool->get()->Refresh(batch.segment_epoch()).ok());
    absl::StatusOr<char*> to = pool->get()->Range(slice.pool_offset(), slice.length());
    REQUIRE(to.ok());
    std::memcpy(*to, bytes.data() + slice.item_offset(), slice.length());
    grpc::ClientContext context;
    v1::SubmitSnapshotRequest request;
    request.set_session_id(attached.session_id());
    request.set_save_id(planned.save_id());
    request.set_batch_id(batch.batch_id());
    v1::SubmitSnapshotResponse response;
    grpc::Status s = stub->SubmitSnapshot(&context, request, &response);
    INFO(s.error_message());
    REQUIRE(s.ok());
  };
  copy_and_submit(/*expect_last=*/false);
  // The second half is not even copied yet, and the writer already writes.
  REQUIRE(d.gate->WaitForFirstWrite(absl::Seconds(30)));
  copy_and_submit(/*expect_last=*/true);

  for (;;) {
    grpc::ClientContext wait_context;
    v1::WaitSaveRequest wait;
    wait.set_session_id(attached.session_id());
    wait.set_save_id(planned.save_id());
    v1::WaitSaveResponse waited;
    REQUIRE(stub->WaitSave(&wait_context, wait, &waited).ok());
    if (waited.done()) break;
  }

  // And what was written in two pieces loads back bit-exact.
  ClientOptions options;
  options.socket_path = d.dir + "/ckptd.sock";
  options.job = "pipe";
  auto client = Client::Attach(options);
  REQUIRE(client.ok());
  std::vector<char> loaded(bytes.size(), 0);
  HostTensor target = weight;
  target.data = loaded.data();
  REQUIRE((*client)->Load(1, {target}).ok());
  CHECK(loaded == bytes);
}

TEST_CASE("a save that does not fit the pool waits, then succeeds", "[pipeline][pool]") {
  // Room for one 1 MiB snapshot, not two.
  InProcessDaemon d(/*gate_open=*/false, 1536 << 10);
  ClientOptions options;
  options.socket_path = d.dir + "/ckptd.sock";
  options.job = "full";
  options.pipeline_bytes = 64 << 10;
  auto client = Client::Attach(options);
  REQUIRE(client.ok());
  std::vector<char> bytes;
  HostTensor weight = Weight(256, bytes);

  auto first = (*client)->Save(1, {weight}, {});
  REQUIRE(first.ok());
  REQUIRE((*first)->WaitSnapshot().ok());  // in the pool; its writes are held at the gate
  REQUIRE(d.Status().pool_used_bytes() >= bytes.size());

  auto second = (*client)->Save(2, {weight}, {});
  REQUIRE(second.ok());
  // The second save's lease cannot be had while the first holds the pool.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (d.Status().pool_waiters() != 1 && absl::Now() < deadline) std::this_thread::yield();
  REQUIRE(d.Status().pool_waiters() == 1);
  CHECK(d.Status().pool_used_bytes() <= 1536u << 10);  // never over-committed

  d.gate->Open();  // the first drains, the second gets its lease
  CHECK((*first)->WaitPersisted().ok());
  CHECK((*second)->WaitPersisted().ok());
  const v1::GetStatusResponse status = d.Status();
  CHECK(status.pool_waiters() == 0);
  CHECK(status.pool_stall_ms() > 0);
  CHECK(status.checkpoints_committed() == 2);

  std::vector<char> loaded(bytes.size(), 0);
  HostTensor target = weight;
  target.data = loaded.data();
  auto step = (*client)->Load(kLatestStep, {target});
  REQUIRE(step.ok());
  CHECK(*step == 2);
  CHECK(loaded == bytes);
}

}  // namespace ckpt::testing

namespace ckpt::testing {

TEST_CASE("batches split items only at chunk boundaries", "[pipeline]") {
  InProcessDaemon d(/*gate_open=*/true, 32 << 20);
  ClientOptions options;
  options.socket_path = d.dir + "/ckptd.sock";
  options.job = "odd";
  options.pipeline_bytes = 3 * (64 << 10);  // three chunks per batch
  auto client = Client::Attach(options);
  REQUIRE(client.ok());
  // Sizes that straddle batches: a batch started by one item leaves room
  // that is not a whole number of chunks for the next.
  std::vector<HostTensor> tensors;
  std::vector<std::vector<char>> buffers;
  for (int64_t bytes : {1000, 5 * 65536 + 77, 65536, 3 * 65536 - 1, 11 * 65536 + 4095}) {
    HostTensor t;
    t.fqn = "t" + std::to_string(bytes);
    t.dtype = DType::kUInt8;
    t.global_shape = {bytes};
    buffers.push_back(*PatternShard(t));
    t.data = buffers.back().data();
    tensors.push_back(t);
  }
  auto saved =
      (*client)->Save(1, tensors, {{"small", false, "x"}, {"odd", true, std::string(70000, 'y')}});
  REQUIRE(saved.ok());
  INFO((*saved)->WaitPersisted().ToString());
  REQUIRE((*saved)->WaitPersisted().ok());
  std::vector<std::vector<char>> loaded;
  std::vector<HostTensor> targets = tensors;
  for (size_t i = 0; i < targets.size(); ++i) {
    loaded.emplace_back(buffers[i].size(), 0);
    targets[i].data = loaded.back().data();
  }
  std::string small, odd;
  auto step = (*client)->Load(1, targets, {{"small", &small}, {"odd", &odd}});
  INFO(step.status().ToString());
  REQUIRE(step.ok());
  for (size_t i = 0; i < targets.size(); ++i) CHECK(loaded[i] == buffers[i]);
  CHECK(small == "x");
  CHECK(odd == std::string(70000, 'y'));
}

}  // namespace ckpt::testing

namespace ckpt::testing {

TEST_CASE("state four times the pool saves and loads, two jobs at once", "[pipeline][pool]") {
  // 1 MiB of pool, 128 KiB batches; job "big" has 2 ranks holding row halves
  // of a 4 MiB tensor, job "other" 1 rank with 4 MiB of its own.
  InProcessDaemon d(/*gate_open=*/true, 1 << 20, /*batch_bytes=*/128 << 10);
  auto attach = [&](const std::string& job, int rank, int world) {
    ClientOptions options;
    options.socket_path = d.dir + "/ckptd.sock";
    options.job = job;
    options.rank = rank;
    options.world_size = world;
    auto client = Client::Attach(options);
    REQUIRE(client.ok());
    return std::move(*client);
  };
  std::vector<std::unique_ptr<Client>> big;
  big.push_back(attach("big", 0, 2));
  big.push_back(attach("big", 1, 2));
  std::unique_ptr<Client> other = attach("other", 0, 1);
  std::vector<char> whole;
  HostTensor w = Weight(1024, whole);  // [1024, 1024] float32: 4 MiB
  std::vector<HostTensor> halves(2, w);
  for (int r = 0; r < 2; ++r) {
    halves[r].region = Region::Box({r * 512, 0}, {512, 1024});
    halves[r].data = whole.data() + r * (whole.size() / 2);
  }
  std::vector<char> own;
  HostTensor o = Weight(1024, own);
  o.fqn = "other.w";
  own.assign(own.size(), 0);
  for (size_t i = 0; i < own.size(); ++i) own[i] = static_cast<char>(i * 7 + 3);

  std::vector<std::shared_ptr<SaveHandle>> handles;
  for (int r = 0; r < 2; ++r) {
    std::vector<SaveObject> objects;
    if (r == 0) objects.push_back({"rng", true, std::string(100, 'r')});
    auto h = big[r]->Save(1, {halves[r]}, objects);
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  auto h = other->Save(1, {o}, {});
  REQUIRE(h.ok());
  handles.push_back(*h);
  for (auto& handle : handles) {
    absl::Status s = handle->WaitPersisted();
    INFO(s.ToString());
    CHECK(s.ok());
  }
  CHECK(d.Status().pool_used_bytes() == 0);

  // Four data-parallel ranks each load the whole 4 MiB through the same
  // 1 MiB pool (each chunk read once, handed to all four).
  std::vector<std::unique_ptr<Client>> loaders;
  for (int r = 0; r < 4; ++r) loaders.push_back(attach("big", r, 4));
  std::vector<std::vector<char>> loaded(4, std::vector<char>(whole.size(), 0));
  std::vector<absl::StatusOr<int64_t>> steps(4, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      HostTensor target = w;
      target.data = loaded[r].data();
      std::string rng;
      steps[r] = loaders[r]->Load(1, {target}, {{"rng", &rng}});
      if (rng != std::string(100, 'r')) steps[r] = absl::DataLossError("object rng differs");
    });
  }
  std::vector<char> other_loaded(own.size(), 0);
  HostTensor other_target = o;
  other_target.data = other_loaded.data();
  CHECK(other->Load(1, {other_target}).ok());
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << steps[r].status().ToString());
    REQUIRE(steps[r].ok());
    CHECK(loaded[r] == whole);
  }
  CHECK(other_loaded == own);
  CHECK(d.Status().pool_used_bytes() == 0);
}

}  // namespace ckpt::testing

namespace ckpt::testing {

TEST_CASE("ranks that together hold every room of the pool still save", "[pipeline][pool]") {
  // 1 MiB of pool in 256 KiB batches: four rooms, one per rank of four.
  // Each rank holds its room while it copies; its next one can only come
  // from a room written and freed, so a rank must submit before it waits
  // for the next (else all four wait on each other to pool_wait_timeout).
  InProcessDaemon d(/*gate_open=*/true, 1 << 20, /*batch_bytes=*/256 << 10);
  std::vector<char> whole;
  HostTensor w = Weight(1024, whole);  // [1024, 1024] float32: 4 MiB, 1 MiB per rank
  std::vector<std::unique_ptr<Client>> ranks;
  for (int r = 0; r < 4; ++r) {
    ClientOptions options;
    options.socket_path = d.dir + "/ckptd.sock";
    options.job = "wide";
    options.rank = r;
    options.world_size = 4;
    auto client = Client::Attach(options);
    REQUIRE(client.ok());
    ranks.push_back(std::move(*client));
  }
  std::vector<std::shared_ptr<SaveHandle>> handles;
  for (int r = 0; r < 4; ++r) {
    HostTensor quarter = w;
    quarter.region = Region::Box({r * 256, 0}, {256, 1024});
    quarter.data = whole.data() + r * (whole.size() / 4);
    auto h = ranks[r]->Save(1, {quarter}, {});
    REQUIRE(h.ok());
    handles.push_back(*h);
  }
  for (auto& handle : handles) {
    absl::Status s = handle->WaitPersisted();
    INFO(s.ToString());
    CHECK(s.ok());
  }
  std::vector<char> loaded(whole.size(), 0);
  HostTensor target = w;
  target.data = loaded.data();
  ClientOptions options;
  options.socket_path = d.dir + "/ckptd.sock";
  options.job = "wide";
  auto reader = Client::Attach(options);
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Load(1, {target}).ok());
  CHECK(loaded == whole);
  CHECK(d.Status().pool_used_bytes() == 0);
}

TEST_CASE("empty objects and zero-size tensors save and load", "[pipeline]") {
  InProcessDaemon d(/*gate_open=*/true, 4 << 20);
  ClientOptions options;
  options.socket_path = d.dir + "/ckptd.sock";
  options.job = "empty";
  auto client = Client::Attach(options);
  REQUIRE(client.ok());
  char dummy = 0;
  HostTensor none{"model.none", DType::kFloat32, {0, 16}, Region::Whole(), &dummy};
  float scalar = 2.5f;
  HostTensor zero_d{"model.scalar", DType::kFloat32, {}, Region::Whole(), &scalar};
  auto saved = (*client)->Save(1, {none, zero_d}, {{"empty", true, ""}, {"one", false, "1"}});
  REQUIRE(saved.ok());
  absl::Status persisted = (*saved)->WaitPersisted();
  INFO(persisted.ToString());
  REQUIRE(persisted.ok());
  float loaded_scalar = 0;
  HostTensor scalar_target = zero_d;
  scalar_target.data = &loaded_scalar;
  std::string empty = "not empty", one;
  auto step = (*client)->Load(1, {none, scalar_target}, {{"empty", &empty}, {"one", &one}});
  INFO(step.status().ToString());
  REQUIRE(step.ok());
  CHECK(loaded_scalar == 2.5f);
  CHECK(empty.empty());
  CHECK(one == "1");
}

}  // namespace ckpt::testing
