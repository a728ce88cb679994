// Memory comes back: after a request ckptd refuses or fails, its heap is
// back within 64 MiB of where it was, against a real ckptd. glibc keeps
// what a request freed in its arenas unless the daemon gives it back (an
// attacker left 175 MiB resident with one 255 MiB message, 128 MiB with a
// plan of 10^6 tensors, 2.2 GiB with a crafted MANIFEST of 10^7 chunks);
// and a MANIFEST whose parsed form would be too large is refused, naming
// --max_manifest_memory_bytes, before it is parsed.
//
// The heap is read as RssAnon (heap, stacks, anonymous maps: the pool is a
// shared-memory file and not counted). The daemon gives freed memory back
// in its reap loop, so "after" is polled, with an RPC between readings and
// a deadline, never a sleep. Each case prints
//   rss <case> before=<kB> after=<kB> growth=<kB> peak=<kB>
// (peak is VmHWM since the case began, the pool's 256 MiB included).
// so the worst growth can be reported.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "ckpt/client.h"
#include "ckpt/v1/manifest.pb.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "proto/lib/crc32c.h"
#include "tests/catch.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

using grpc::StatusCode;

constexpr int64_t kReturnBoundKb = 64 * 1024;
constexpr int64_t kMaxMessageBytes = int64_t{64} << 20;  // ckptd's default

int64_t AnonKb(pid_t pid) { return ProcStatusKb(pid, "RssAnon"); }

// One refused request's effect on the daemon's heap: `before` is read when
// made, the peak is reset then (clear_refs 5 resets VmHWM), and Returned()
// waits for the heap to come back and prints the line.
class RssCase {
 public:
  RssCase(const TestDaemon& d, std::string name) : d_(d), name_(std::move(name)) {
    std::ofstream(absl::StrCat("/proc/", d_.pid(), "/clear_refs")) << "5";
    before_kb_ = AnonKb(d_.pid());
  }

  // Polls until RssAnon is within the bound of `before` (GetStatus between
  // readings, 30 s at most), prints the line, and CHECKs the bound.
  void Returned() {
    int64_t after_kb = AnonKb(d_.pid());
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (after_kb - before_kb_ > kReturnBoundKb && absl::Now() < deadline) {
      (void)d_.Status();
      after_kb = AnonKb(d_.pid());
    }
    const int64_t peak_kb = ProcStatusKb(d_.pid(), "VmHWM");
    std::printf(
        "rss %s before=%lld after=%lld growth=%lld peak=%lld (kB; peak: VmHWM, pool included)\n",
        name_.c_str(), static_cast<long long>(before_kb_), static_cast<long long>(after_kb),
        static_cast<long long>(after_kb - before_kb_), static_cast<long long>(peak_kb));
    std::fflush(stdout);
    INFO("case " << name_ << ": RssAnon " << before_kb_ << " kB before, " << after_kb
                 << " kB after");
    REQUIRE(d_.Running());
    CHECK(after_kb - before_kb_ <= kReturnBoundKb);
  }

 private:
  const TestDaemon& d_;
  const std::string name_;
  int64_t before_kb_ = 0;
};

grpc::Status RawCall(const TestDaemon& d, const std::string& method, const std::string& bytes) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(512 << 20);
  const std::string target = "unix:" + d.socket();
  grpc::GenericStub generic(grpc::CreateCustomChannel(target, d.CredentialsFor(target), args));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  done.WaitForNotification();
  return status;
}

void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Field `field` of wire type 2 holding `bytes`.
void AppendDelimited(std::string& out, int field, const std::string& bytes) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  AppendVarint(out, bytes.size());
  out += bytes;
}

// The MANIFEST of `job` step `step` as an attacker writes it: one tensor
// with one shard of `chunks` empty chunks (2 bytes each on disk, far more
// once parsed), with a valid CRC trailer. Written without building the
// message, which would take the test as much memory as the daemon.
std::string HugeManifest(const std::string& job, int64_t step, int64_t chunks) {
  v1::CheckpointManifest head;
  head.set_format_version(1);
  head.set_job(job);
  head.set_step(step);
  v1::TensorEntry tensor;
  tensor.set_fqn("w");
  tensor.set_dtype(v1::UINT8);
  tensor.add_global_shape(chunks);
  std::string shard;
  shard.reserve(static_cast<size_t>(chunks) * 2);
  for (int64_t i = 0; i < chunks; ++i) AppendDelimited(shard, 3, "");  // StoredShard.chunks
  std::string tensor_bytes = tensor.SerializeAsString();
  AppendDelimited(tensor_bytes, 4, shard);  // TensorEntry.shards
  shard.clear();
  shard.shrink_to_fit();
  std::string out = head.SerializeAsString();
  AppendDelimited(out, 6, tensor_bytes);  // CheckpointManifest.tensors
  const uint32_t crc = Crc32c(out.data(), out.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  return out;
}

// A save and load through the client library, compared byte for byte.
void SaveAndLoadBitExact(const TestDaemon& d, int64_t step) {
  ClientOptions options;
  options.socket_path = d.socket();
  options.job = "after";
  auto client = Client::Attach(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  std::string cells = Pattern(33 * 7 * 2, 42);
  const std::string rng = Pattern(777, 43);
  std::vector<HostTensor> tensors(1);
  tensors[0] = {"cells", DType::kInt16, {33, 7}, Region::Whole(), cells.data()};
  auto handle = (*client)->Save(step, tensors, {{"rng", false, rng}});
  REQUIRE(handle.ok());
  const absl::Status persisted = (*handle)->WaitPersisted();
  INFO(persisted.ToString());
  REQUIRE(persisted.ok());
  std::string cells_out(cells.size(), '\0');
  std::vector<HostTensor> wanted(1);
  wanted[0] = {"cells", DType::kInt16, {33, 7}, Region::Whole(), cells_out.data()};
  std::string rng_out;
  absl::StatusOr<int64_t> loaded = (*client)->Load(step, wanted, {{"rng", &rng_out}});
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  CHECK(cells_out == cells);
  CHECK(rng_out == rng);
}

// A daemon that has saved and loaded once, so that "before" includes what
// serving at all allocates.
void StartWarm(TestDaemon& d) {
  const absl::Status started = d.Start();
  INFO(started.ToString());
  REQUIRE(started.ok());
  SaveAndLoadBitExact(d, 1);
}

}  // namespace

TEST_CASE("memory comes back after messages at and past --max_message_bytes", "[fault][memory]") {
  TestDaemon d;
  StartWarm(d);
  {
    RssCase rss(d, "message-under-limit");
    // Not protobuf: received whole, then refused by the parser.
    const grpc::Status s =
        RawCall(d, "/ckpt.v1.NodeService/PlanSave", Pattern(kMaxMessageBytes - 4096, 1));
    INFO(s.error_code() << " " << s.error_message());
    CHECK(s.error_code() == StatusCode::INTERNAL);
    rss.Returned();
  }
  {
    RssCase rss(d, "message-over-limit-255MiB");
    const grpc::Status s =
        RawCall(d, "/ckpt.v1.NodeService/PlanSave", Pattern((size_t{255} << 20), 2));
    INFO(s.error_code() << " " << s.error_message());
    CHECK(s.error_code() == StatusCode::RESOURCE_EXHAUSTED);
    rss.Returned();
  }
  SaveAndLoadBitExact(d, 2);
}

TEST_CASE("memory comes back after a plan of 10^6 tensors", "[fault][memory]") {
  TestDaemon d;
  StartWarm(d);
  auto stub = d.Stub();
  const std::string session = AttachOk(*stub, "planner");
  {
    v1::PlanSaveRequest request;
    request.set_session_id(session);
    request.set_step(1);
    for (int i = 0; i < 1'000'000; ++i) {
      *request.add_shards() = Whole(absl::StrCat("t", i), v1::UINT8, {1});
    }
    RssCase rss(d, "plan-10^6-tensors");
    v1::PlanSaveResponse response;
    const grpc::Status s =
        Rpc([&](grpc::ClientContext* c) { return stub->PlanSave(c, request, &response); });
    CheckError(s, StatusCode::RESOURCE_EXHAUSTED, "--max_tensors_per_plan");
    rss.Returned();
  }
  CHECK(DetachRaw(*stub, session).ok());
  SaveAndLoadBitExact(d, 2);
}

TEST_CASE("a MANIFEST too large to parse is refused before it is parsed, and memory comes back",
          "[fault][memory]") {
  TestDaemon d;
  StartWarm(d);
  // 10^7 chunks: within --max_manifest_bytes and --max_manifest_chunks.
  const std::string job = "huge";
  const std::string dir = d.job_dir(job) + "/step-1";
  std::filesystem::create_directories(dir);
  {
    const std::string manifest = HugeManifest(job, 1, 10'000'000);
    std::ofstream(dir + "/MANIFEST", std::ios::binary | std::ios::trunc) << manifest;
  }
  auto stub = d.Stub();
  const std::string flag = "--max_manifest_memory_bytes";
  RssCase all(d, "manifest-all");
  {
    RssCase rss(d, "manifest-list");
    v1::ListCheckpointsRequest request;
    request.set_job(job);
    v1::ListCheckpointsResponse response;
    const grpc::Status s =
        Rpc([&](grpc::ClientContext* c) { return stub->ListCheckpoints(c, request, &response); });
    INFO(s.error_message());
    REQUIRE(s.ok());
    REQUIRE(response.checkpoints_size() == 1);
    CHECK(response.checkpoints(0).broken());
    CHECK_THAT(response.checkpoints(0).broken_reason(), Catch::Contains(flag));
    CHECK_THAT(response.checkpoints(0).broken_reason(), Catch::Contains(dir + "/MANIFEST"));
    rss.Returned();
  }
  {
    RssCase rss(d, "manifest-inspect");
    v1::InspectCheckpointRequest request;
    request.set_job(job);
    request.set_step(1);
    v1::InspectCheckpointResponse response;
    const grpc::Status s =
        Rpc([&](grpc::ClientContext* c) { return stub->InspectCheckpoint(c, request, &response); });
    CheckError(s, StatusCode::FAILED_PRECONDITION, flag);
    rss.Returned();
  }
  {
    RssCase rss(d, "manifest-verify");
    v1::VerifyCheckpointRequest request;
    request.set_job(job);
    request.set_step(1);
    v1::VerifyCheckpointResponse response;
    const grpc::Status s =
        Rpc([&](grpc::ClientContext* c) { return stub->VerifyCheckpoint(c, request, &response); });
    CheckError(s, StatusCode::FAILED_PRECONDITION, flag);
    rss.Returned();
  }
  {
    // At once: reads wait for one of a few slots, they do not all hold it.
    RssCase rss(d, "manifest-inspect-x8");
    std::vector<grpc::Status> statuses(8);
    std::vector<std::thread> callers;
    for (grpc::Status& status : statuses) {
      callers.emplace_back([&] {
        v1::InspectCheckpointRequest request;
        request.set_job(job);
        request.set_step(1);
        v1::InspectCheckpointResponse response;
        status = Rpc(
            [&](grpc::ClientContext* c) { return stub->InspectCheckpoint(c, request, &response); });
      });
    }
    for (std::thread& caller : callers) caller.join();
    for (const grpc::Status& status : statuses) {
      CheckError(status, StatusCode::FAILED_PRECONDITION, flag);
    }
    rss.Returned();
  }
  all.Returned();
  SaveAndLoadBitExact(d, 2);
}

}  // namespace ckpt::testing
