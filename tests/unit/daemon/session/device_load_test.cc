// A load whose tensors live on the rank's GPU: the daemon copies them there
// itself (the pull path), so the rank is handed no batch for them, yet its
// load must not end before those copies have landed: the trainer reads its
// tensors as soon as Load returns. On an H200 the load used to end first and
// the trainer read zeros (tests/gpu/gpu_checkpoint_test.cc); here a fake GPU
// behind DeviceRuntime's interface holds the copies back to show the order
// on any machine.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gpu/device_runtime.h"
#include "tests/catch.h"
#include "tests/unit/daemon/session/fake_node.h"

namespace ckpt::session::testing {
namespace {

constexpr char kJob[] = "gpu-job";
constexpr int64_t kGlobal = 300000;  // several chunks and load groups

// A GPU whose "device memory" is host memory: an IPC handle is the address
// and size of a host buffer, and copies to the device wait for `release`.
class HeldBackGpu : public gpu::DeviceRuntime {
 public:
  static std::string HandleOf(void* ptr, uint64_t bytes) {
    std::string handle(16, '\0');
    std::memcpy(handle.data(), &ptr, sizeof(ptr));
    std::memcpy(handle.data() + 8, &bytes, sizeof(bytes));
    return handle;
  }

  std::string Name() const override { return "held-back"; }
  bool HasDevice() const override { return true; }
  int DeviceCount() const override { return 1; }
  std::string Describe() const override { return "a fake GPU over host memory"; }
  absl::Status RegisterHostMemory(void*, size_t) override { return absl::OkStatus(); }
  absl::Status UnregisterHostMemory(void*) override { return absl::OkStatus(); }
  absl::StatusOr<gpu::IpcExport> ExportIpcHandle(const void*) override {
    return absl::UnimplementedError("not in this test");
  }
  absl::StatusOr<std::unique_ptr<gpu::IpcMapping>> OpenIpcHandle(const std::string& handle,
                                                                 int device, uint64_t) override {
    void* ptr = nullptr;
    uint64_t bytes = 0;
    if (handle.size() != 16) return absl::InvalidArgumentError("malformed handle");
    std::memcpy(&ptr, handle.data(), sizeof(ptr));
    std::memcpy(&bytes, handle.data() + 8, sizeof(bytes));
    return std::make_unique<gpu::IpcMapping>(ptr, bytes, device, [](void*, int) {});
  }
  absl::StatusOr<gpu::IpcEvent> RecordIpcEvent(void*) override {
    return absl::UnimplementedError("not in this test");
  }
  absl::Status SynchronizeStream(void*) override { return absl::OkStatus(); }
  absl::Status WaitIpcEvent(const std::string&, int) override { return absl::OkStatus(); }
  absl::Status CopyDeviceToHost(const void*, void*, uint64_t, uint64_t,
                                const std::function<void(uint64_t, uint64_t)>&) override {
    return absl::UnimplementedError("not in this test");
  }
  absl::Status CopyHostToDevice(const void* src, void* dst, uint64_t bytes) override {
    release.WaitForNotification();
    std::memcpy(dst, src, bytes);
    absl::MutexLock lock(&mu);
    copied += bytes;
    return absl::OkStatus();
  }

  absl::Notification release;
  absl::Mutex mu;
  uint64_t copied ABSL_GUARDED_BY(mu) = 0;
};

TEST_CASE("a load ends only after the daemon's copies to the rank's GPU have landed", "[session]") {
  auto owned = std::make_unique<HeldBackGpu>();
  HeldBackGpu* gpu = owned.get();
  FakeNode node(8 << 20, 64 << 10, std::move(owned));
  {
    RankSession saver = node.Attach(kJob, 0, 1);
    auto save = std::make_shared<SaveSession>(node.context(), kJob, 3, 1, 1);
    RankState state;
    AddShard(state, "w", kGlobal, 0, kGlobal, /*seed=*/5);
    REQUIRE(node.SaveRank(*save, saver, state).ok());
    REQUIRE(node.context().sessions.Detach(saver.id).ok());
  }

  RankSession rank = node.Attach(kJob, 0, 1);
  auto load = std::make_shared<LoadSession>(node.context(), kJob, 3, 1, 1);
  std::string device(kGlobal, '\0');  // the rank's "GPU tensor"
  v1::LoadRequest request;
  request.set_step(3);
  AddLoadShard(request, "w", kGlobal, 0, kGlobal);
  v1::DeviceBuffer* buffer = request.mutable_tensors(0)->mutable_device_buffer();
  buffer->set_ipc_handle(HeldBackGpu::HandleOf(device.data(), device.size()));
  buffer->set_allocation_bytes(device.size());
  REQUIRE(load->Load(rank, request).ok());

  // While the copies are held back, the rank is told to ask again, never
  // that its load is over.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::LoadBatch> batch = load->NextBatch(rank, 0, absl::Milliseconds(20));
    REQUIRE(batch.ok());
    CHECK_FALSE(batch->last());
    CHECK(batch->deliveries_size() == 0);
  }
  gpu->release.Notify();
  bool last = false;
  for (int i = 0; i < 100 && !last; ++i) {
    absl::StatusOr<v1::LoadBatch> batch = load->NextBatch(rank, 0, absl::Seconds(10));
    REQUIRE(batch.ok());
    last = batch->last();
  }
  REQUIRE(last);
  {
    absl::MutexLock lock(&gpu->mu);
    CHECK(gpu->copied == kGlobal);
  }
  bool exact = true;
  for (int64_t i = 0; i < kGlobal && exact; ++i) {
    exact = static_cast<uint8_t>(device[i]) == PatternByte(5, i);
  }
  CHECK(exact);
}

}  // namespace
}  // namespace ckpt::session::testing
