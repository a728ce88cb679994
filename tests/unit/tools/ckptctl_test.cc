// ckptctl's commands against an in-process fake NodeService on a Unix socket.
// The fake stands in for ckptd only to check the CLI's formatting and exit
// codes; it knows nothing about checkpoints.
#include "tools/ckptctl/commands.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include "tests/catch.h"

namespace ckpt::ctl {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kGiB = 1ull << 30;

// A directory under /tmp, short enough for a Unix socket path.
class TempDir {
 public:
  TempDir() {
    char path[] = "/tmp/ckptctl_test.XXXXXX";
    REQUIRE(mkdtemp(path) != nullptr);
    path_ = path;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class FakeNode final : public v1::NodeService::Service {
 public:
  // Canned answers, set before the first call.
  v1::GetStatusResponse status;
  v1::ListCheckpointsResponse list;
  grpc::Status inspect_status;
  v1::InspectCheckpointResponse inspect;
  grpc::Status verify_status;
  v1::VerifyCheckpointResponse verify;
  std::chrono::milliseconds verify_delay{0};

  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::GetStatusResponse* response) override {
    *response = status;
    return grpc::Status::OK;
  }
  grpc::Status ListCheckpoints(grpc::ServerContext*, const v1::ListCheckpointsRequest* request,
                               v1::ListCheckpointsResponse* response) override {
    Record(request->job(), 0);
    *response = list;
    return grpc::Status::OK;
  }
  grpc::Status InspectCheckpoint(grpc::ServerContext*, const v1::InspectCheckpointRequest* request,
                                 v1::InspectCheckpointResponse* response) override {
    Record(request->job(), request->step());
    *response = inspect;
    return inspect_status;
  }
  grpc::Status VerifyCheckpoint(grpc::ServerContext* context,
                                const v1::VerifyCheckpointRequest* request,
                                v1::VerifyCheckpointResponse* response) override {
    Record(request->job(), request->step());
    const auto until = std::chrono::steady_clock::now() + verify_delay;
    while (std::chrono::steady_clock::now() < until && !context->IsCancelled()) {
      std::this_thread::sleep_for(5ms);
    }
    *response = verify;
    return verify_status;
  }
  grpc::Status CancelSave(grpc::ServerContext*, const v1::CancelSaveRequest* request,
                          v1::CancelSaveResponse*) override {
    Record(request->job(), request->step());
    return grpc::Status::OK;
  }

  std::pair<std::string, int64_t> last_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return {last_job_, last_step_};
  }

 private:
  void Record(const std::string& job, int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    last_job_ = job;
    last_step_ = step;
  }

  std::mutex mu_;
  std::string last_job_;
  int64_t last_step_ = 0;
};

// A real gRPC server with the fake on a Unix socket, and a client for it.
class FakeDaemon {
 public:
  FakeDaemon() : target_("unix:" + dir_.path() + "/ckptd.sock") {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(target_, grpc::InsecureServerCredentials());
    builder.RegisterService(&node);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    channel_ = *MakeChannel(target_);
    stub_ = v1::NodeService::NewStub(channel_);
  }
  ~FakeDaemon() { server_->Shutdown(std::chrono::system_clock::now() + 1s); }

  Call MakeCall(std::chrono::milliseconds timeout = 5s) {
    Call call;
    call.stub = stub_.get();
    call.timeout = timeout;
    call.target = target_;
    call.channel = channel_.get();
    call.out = &out;
    call.err = &err;
    return call;
  }

  FakeNode node;
  std::ostringstream out;
  std::ostringstream err;

 private:
  TempDir dir_;
  std::string target_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::NodeService::Stub> stub_;
};

bool OneLine(const std::string& text) {
  return !text.empty() && text.back() == '\n' && text.find('\n') == text.size() - 1;
}

TEST_CASE("ParseStep accepts latest and non-negative integers only", "[ckptctl]") {
  CHECK(ParseStep("latest").value() == -1);
  CHECK(ParseStep("0").value() == 0);
  CHECK(ParseStep("1234").value() == 1234);
  CHECK(ParseStep("9223372036854775807").value() == INT64_MAX);

  for (const char* bad : {"", "-1", "-0", "+5", " 5", "5 ", "12x", "1e3", "0x10", "LATEST",
                          "9223372036854775808", "99999999999999999999"}) {
    INFO("step text: \"" << bad << "\"");
    const auto parsed = ParseStep(bad);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK_FALSE(ParseStep("latest", /*allow_latest=*/false).ok());
  CHECK(ParseStep("7", /*allow_latest=*/false).value() == 7);
}

TEST_CASE("human units", "[ckptctl]") {
  CHECK(FormatBytes(0) == "0 B");
  CHECK(FormatBytes(1023) == "1023 B");
  CHECK(FormatBytes(1024) == "1.0 KiB");
  CHECK(FormatBytes(3 * kGiB / 2) == "1.5 GiB");
  CHECK(FormatBytes(16 * kGiB) == "16.0 GiB");
  CHECK(FormatBytes(UINT64_MAX) == "16.0 EiB");

  CHECK(FormatDuration(0) == "0s");
  CHECK(FormatDuration(59) == "59s");
  CHECK(FormatDuration(3600) == "1h 0m 0s");
  CHECK(FormatDuration(86400 + 2 * 3600 + 3 * 60 + 4) == "1d 2h 3m 4s");

  CHECK(FormatUtcMillis(0) == "1970-01-01T00:00:00.000Z");
  CHECK(FormatUtcMillis(1714564800123) == "2024-05-01T12:00:00.123Z");
  CHECK(FormatUtcMillis(-1) == "1969-12-31T23:59:59.999Z");
}

TEST_CASE("TargetFor prefers the TCP address", "[ckptctl]") {
  CHECK(TargetFor("/run/ckptd/ckptd.sock", "") == "unix:/run/ckptd/ckptd.sock");
  CHECK(TargetFor("/run/ckptd/ckptd.sock", "node7:7470") == "node7:7470");
}

v1::GetStatusResponse CannedStatus() {
  v1::GetStatusResponse s;
  s.set_version("0.1.0");
  s.set_host("node-17");
  s.set_storage_root("/var/lib/ckpt");
  s.set_pool_bytes(16 * kGiB);
  s.set_pool_used_bytes(4 * kGiB);
  s.set_gpu_available(true);
  s.set_attached_ranks(8);
  s.set_storage_bytes_written(3 * kGiB / 2);
  s.set_storage_bytes_read(512);
  s.set_checkpoints_committed(42);
  s.set_uptime_seconds(86400 + 2 * 3600 + 3 * 60 + 4);
  v1::SaveProgress* save = s.add_saves();
  save->set_job("llama");
  save->set_step(1000);
  save->set_phase("writing");
  save->set_bytes_total(4 * kGiB);
  save->set_bytes_written(kGiB);
  save->set_ranks_snapshotted(6);
  save->set_world_size(8);
  save->set_elapsed_ms(2000);  // 1 GiB in 2 s: 512 MiB/s, 3 GiB left: 6 s
  v1::LoadProgress* load = s.add_loads();
  load->set_job("gpt");
  load->set_step(-1);
  load->set_phase("reading");
  load->set_bytes_total(2 * kGiB);
  load->set_bytes_read(kGiB / 2);
  load->set_ranks_arrived(4);
  load->set_world_size(4);
  load->set_elapsed_ms(1000);
  s.set_loads_in_flight(1);
  return s;
}

TEST_CASE("status prints every field in human units", "[ckptctl]") {
  FakeDaemon daemon;
  daemon.node.status = CannedStatus();

  REQUIRE(RunStatus(daemon.MakeCall(), /*json=*/false) == kExitOk);
  const std::string out = daemon.out.str();
  INFO(out);
  CHECK(daemon.err.str().empty());
  CHECK_THAT(out, Catch::Contains("ckptd 0.1.0 on node-17"));
  CHECK_THAT(out, Catch::Contains("/var/lib/ckpt"));
  CHECK_THAT(out, Catch::Contains("1d 2h 3m 4s"));
  CHECK_THAT(out, Catch::Contains("4.0 GiB / 16.0 GiB used (25.0%)"));
  CHECK_THAT(out, Catch::Matches(R"((.|\n)*gpu +yes\n(.|\n)*)"));
  CHECK_THAT(out, Catch::Matches(R"((.|\n)*attached ranks +8\n(.|\n)*)"));
  CHECK_THAT(out, Catch::Matches(R"((.|\n)*bytes written +1\.5 GiB\n(.|\n)*)"));
  CHECK_THAT(out, Catch::Matches(R"((.|\n)*bytes read +512 B\n(.|\n)*)"));
  CHECK_THAT(out, Catch::Matches(R"((.|\n)*checkpoints committed +42\n(.|\n)*)"));
  CHECK_THAT(out, Catch::Contains("saves in flight: 1"));
  CHECK_THAT(out, Catch::Contains("save job llama step 1000: writing, 1.0 GiB / "
                                  "4.0 GiB (25.0%), 512.0 MiB/s, ETA 6s, ranks 6/8 snapshotted"));
  CHECK_THAT(out, Catch::Contains("loads in flight: 1"));
  CHECK_THAT(out, Catch::Contains("load job gpt step latest: reading, 512.0 MiB / 2.0 GiB read "
                                  "(25.0%), 512.0 MiB/s, ETA 3s, ranks 4/4 arrived"));
}

TEST_CASE("watch prints status until nothing is in flight", "[ckptctl]") {
  FakeDaemon daemon;
  daemon.node.status.set_version("0.1.0");  // idle: one round, then done
  REQUIRE(RunWatch(daemon.MakeCall(), std::chrono::milliseconds(1), /*json=*/true) == kExitOk);
  const std::string out = daemon.out.str();
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  CHECK_THAT(out, Catch::Contains("\"version\":\"0.1.0\""));
}

TEST_CASE("status with nothing in flight and no pool", "[ckptctl]") {
  FakeDaemon daemon;
  daemon.node.status.set_version("0.1.0");
  REQUIRE(RunStatus(daemon.MakeCall(), /*json=*/false) == kExitOk);
  CHECK_THAT(daemon.out.str(), Catch::Contains("0 B / 0 B used (-)"));
  CHECK_THAT(daemon.out.str(), Catch::Contains("gpu                    no"));
  CHECK_THAT(daemon.out.str(), Catch::Contains("saves in flight: none"));
}

TEST_CASE("status --json round-trips", "[ckptctl]") {
  FakeDaemon daemon;
  daemon.node.status = CannedStatus();
  REQUIRE(RunStatus(daemon.MakeCall(), /*json=*/true) == kExitOk);
  const std::string out = daemon.out.str();
  CHECK_THAT(out, Catch::Contains("\"storage_root\": \"/var/lib/ckpt\""));
  v1::GetStatusResponse parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(out, &parsed).ok());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(parsed, daemon.node.status));
}

TEST_CASE("list prints a table sorted by step with the latest marked", "[ckptctl]") {
  FakeDaemon daemon;
  auto add = [&](int64_t step, int64_t ms, uint64_t bytes, bool latest) {
    v1::CheckpointSummary* c = daemon.node.list.add_checkpoints();
    c->set_step(step);
    c->set_created_unix_ms(ms);
    c->set_bytes(bytes);
    c->set_tensors(1234);
    c->set_objects(8);
    c->set_latest(latest);
  };
  add(2000, 1714564800123, 3 * kGiB / 2, true);
  add(1000, 1714561200000, kGiB, false);

  REQUIRE(RunList(daemon.MakeCall(), "llama", /*json=*/false) == kExitOk);
  CHECK(daemon.node.last_request().first == "llama");
  const std::string out = daemon.out.str();
  INFO(out);
  std::istringstream lines(out);
  std::string header, first, second, extra;
  REQUIRE(std::getline(lines, header));
  REQUIRE(std::getline(lines, first));
  REQUIRE(std::getline(lines, second));
  CHECK_FALSE(std::getline(lines, extra));
  CHECK_THAT(header, Catch::Contains("STEP") && Catch::Contains("CREATED") &&
                         Catch::Contains("SIZE") && Catch::Contains("TENSORS") &&
                         Catch::Contains("OBJECTS"));
  CHECK_THAT(first, Catch::Contains("1000") && Catch::Contains("2024-05-01T11:00:00.000Z") &&
                        Catch::Contains("1.0 GiB") && Catch::Contains("1234"));
  CHECK_THAT(first, !Catch::Contains("latest"));
  CHECK_THAT(second, Catch::Contains("2000") && Catch::Contains("2024-05-01T12:00:00.123Z") &&
                         Catch::Contains("1.5 GiB") && Catch::EndsWith("latest"));
}

TEST_CASE("list shows broken checkpoints with their reason", "[ckptctl]") {
  FakeDaemon daemon;
  v1::CheckpointSummary* good = daemon.node.list.add_checkpoints();
  good->set_step(100);
  good->set_created_unix_ms(1714561200000);
  good->set_bytes(kGiB);
  v1::CheckpointSummary* bad = daemon.node.list.add_checkpoints();
  bad->set_step(200);
  bad->set_latest(true);
  bad->set_broken(true);
  bad->set_broken_reason("/r/j/step-200/MANIFEST: manifest checksum mismatch\nsecond line");

  REQUIRE(RunList(daemon.MakeCall(), "j", /*json=*/false) == kExitOk);
  const std::string out = daemon.out.str();
  INFO(out);
  std::istringstream lines(out);
  std::string header, first, second, extra;
  REQUIRE(std::getline(lines, header));
  REQUIRE(std::getline(lines, first));
  REQUIRE(std::getline(lines, second));
  CHECK_FALSE(std::getline(lines, extra));  // the reason stays on its line
  CHECK_THAT(first,
             Catch::Contains("100") && Catch::Contains("1.0 GiB") && !Catch::Contains("BROKEN"));
  CHECK_THAT(second, Catch::Contains("200") && Catch::Contains("BROKEN") &&
                         Catch::Contains("latest") &&
                         Catch::Contains("manifest checksum mismatch second line"));

  std::ostringstream json;
  Call call = daemon.MakeCall();
  call.out = &json;
  REQUIRE(RunList(call, "j", /*json=*/true) == kExitOk);
  CHECK_THAT(json.str(),
             Catch::Contains("\"broken\": true") && Catch::Contains("\"broken_reason\""));
}

TEST_CASE("list of a job without checkpoints", "[ckptctl]") {
  FakeDaemon daemon;
  REQUIRE(RunList(daemon.MakeCall(), "empty", /*json=*/false) == kExitOk);
  CHECK(daemon.out.str() == "no checkpoints for job empty\n");

  std::ostringstream json;
  Call call = daemon.MakeCall();
  call.out = &json;
  REQUIRE(RunList(call, "empty", /*json=*/true) == kExitOk);
  CHECK_THAT(json.str(), Catch::Contains("\"checkpoints\": []"));
}

TEST_CASE("inspect prints the manifest as JSON", "[ckptctl]") {
  FakeDaemon daemon;
  v1::CheckpointManifest* m = daemon.node.inspect.mutable_manifest();
  m->set_format_version(1);
  m->set_job("llama");
  m->set_step(2000);
  v1::TensorEntry* t = m->add_tensors();
  t->set_fqn("layers.0.attn.wq");
  t->set_dtype(v1::BFLOAT16);
  t->add_global_shape(4096);
  t->add_global_shape(4096);
  v1::StoredChunk* chunk = t->add_shards()->add_chunks();
  chunk->set_file("data/node-17-0.bin");
  chunk->set_length(4096ull * 4096 * 2);

  REQUIRE(RunInspect(daemon.MakeCall(), "llama", -1) == kExitOk);
  CHECK(daemon.node.last_request() == std::pair<std::string, int64_t>("llama", -1));
  const std::string out = daemon.out.str();
  INFO(out);
  CHECK_THAT(out, Catch::Contains("\"fqn\": \"layers.0.attn.wq\""));
  CHECK_THAT(out, Catch::Contains("\"dtype\": \"BFLOAT16\""));
  CHECK_THAT(out, Catch::Contains("\"file\": \"data/node-17-0.bin\""));
  // Zero-valued fields stay visible.
  CHECK_THAT(out, Catch::Contains("\"file_offset\": \"0\""));
  v1::CheckpointManifest parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(out, &parsed).ok());
  CHECK(google::protobuf::util::MessageDifferencer::Equals(parsed, *m));
}

TEST_CASE("inspect of a missing checkpoint fails with exit 1", "[ckptctl]") {
  FakeDaemon daemon;
  daemon.node.inspect_status = grpc::Status(grpc::StatusCode::NOT_FOUND, "job llama has no step 7");
  CHECK(RunInspect(daemon.MakeCall(), "llama", 7) == kExitFailed);
  CHECK(daemon.out.str().empty());
  CHECK(daemon.err.str() == "ckptctl: inspect: NOT_FOUND: job llama has no step 7\n");
}

TEST_CASE("verify reports the chunks it checked", "[ckptctl]") {
  FakeDaemon daemon;
  daemon.node.verify.set_chunks_checked(12);
  daemon.node.verify.set_bytes_checked(49152);
  REQUIRE(RunVerify(daemon.MakeCall(), "llama", 2000) == kExitOk);
  CHECK(daemon.node.last_request() == std::pair<std::string, int64_t>("llama", 2000));
  CHECK(daemon.out.str() == "OK: 12 chunks, 49152 bytes verified\n");
  CHECK(daemon.err.str().empty());
}

TEST_CASE("verify prints the daemon's DATA_LOSS message and exits 1", "[ckptctl]") {
  FakeDaemon daemon;
  daemon.node.verify_status =
      grpc::Status(grpc::StatusCode::DATA_LOSS,
                   "crc mismatch in step-2000/data/node-17-0.bin at offset 8192 "
                   "(tensor layers.0.attn.wq):\nwant 0x1234abcd got 0x00000000");
  CHECK(RunVerify(daemon.MakeCall(), "llama", -1) == kExitFailed);
  CHECK(daemon.out.str().empty());
  const std::string err = daemon.err.str();
  INFO(err);
  CHECK(OneLine(err));
  CHECK_THAT(err, Catch::StartsWith("ckptctl: verify: DATA_LOSS: "));
  CHECK_THAT(err, Catch::Contains("data/node-17-0.bin at offset 8192") &&
                      Catch::Contains("layers.0.attn.wq") && Catch::Contains("want 0x1234abcd"));
}

TEST_CASE("a daemon that is reachable but too slow is a failure, not exit 3", "[ckptctl]") {
  FakeDaemon daemon;
  daemon.node.verify_delay = 5s;
  CHECK(RunVerify(daemon.MakeCall(200ms), "llama", -1) == kExitFailed);
  CHECK(OneLine(daemon.err.str()));
  CHECK_THAT(daemon.err.str(),
             Catch::StartsWith("ckptctl: verify: no answer from ckptd within 0.2s"));
}

TEST_CASE("cancel", "[ckptctl]") {
  FakeDaemon daemon;
  REQUIRE(RunCancel(daemon.MakeCall(), "llama", 3000) == kExitOk);
  CHECK(daemon.node.last_request() == std::pair<std::string, int64_t>("llama", 3000));
  CHECK(daemon.out.str() == "cancelled job llama step 3000\n");
}

TEST_CASE("nothing listening on the socket is exit 3", "[ckptctl]") {
  TempDir dir;
  const std::string target = "unix:" + dir.path() + "/nobody.sock";
  auto channel = *MakeChannel(target);
  auto stub = v1::NodeService::NewStub(channel);
  std::ostringstream out, err;
  Call call;
  call.stub = stub.get();
  call.timeout = 5s;
  call.target = target;
  call.channel = channel.get();
  call.out = &out;
  call.err = &err;

  const auto start = std::chrono::steady_clock::now();
  CHECK(RunStatus(call, /*json=*/false) == kExitUnreachable);
  // Fails fast rather than waiting for the timeout.
  CHECK(std::chrono::steady_clock::now() - start < 4s);
  CHECK(out.str().empty());
  CHECK(OneLine(err.str()));
  CHECK_THAT(err.str(), Catch::StartsWith("ckptctl: status: cannot reach ckptd at " + target));

  std::ostringstream err2;
  call.err = &err2;
  CHECK(RunVerify(call, "llama", -1) == kExitUnreachable);
  CHECK_THAT(err2.str(), Catch::StartsWith("ckptctl: verify: cannot reach"));
}

TEST_CASE("a socket that accepts but never speaks gRPC is exit 3", "[ckptctl]") {
  // The kernel completes the connection from the backlog, the HTTP/2
  // handshake never does: the call times out before the channel is READY.
  TempDir dir;
  const std::string path = dir.path() + "/mute.sock";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(fd, 16) == 0);

  const std::string target = "unix:" + path;
  auto channel = *MakeChannel(target);
  auto stub = v1::NodeService::NewStub(channel);
  std::ostringstream out, err;
  Call call;
  call.stub = stub.get();
  call.timeout = 300ms;
  call.target = target;
  call.channel = channel.get();
  call.out = &out;
  call.err = &err;
  CHECK(RunStatus(call, /*json=*/false) == kExitUnreachable);
  CHECK_THAT(err.str(), Catch::StartsWith("ckptctl: status: cannot reach ckptd at " + target +
                                          " within 0.3s"));
  close(fd);
}

}  // namespace
}  // namespace ckpt::ctl
