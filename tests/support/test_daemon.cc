#include "tests/support/test_daemon.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/catch.h"
#include "tests/support/http_get.h"

namespace ckpt::testing {

namespace {

// The build's path of a program, unless the environment names another: a
// test binary run from tools/dev/gpu-check.sh's bundle, on a machine without
// this build tree, finds the bundled programs through CKPTD, CKPT_DEMO_RANK
// and CKPTCTL (the agent's tests read the same names).
std::string BuiltOr(const char* variable, const char* built) {
  const char* set = std::getenv(variable);
  return set != nullptr && *set != '\0' ? set : built;
}

}  // namespace

std::string CkptdPath() { return BuiltOr("CKPTD", CKPT_TEST_CKPTD_PATH); }
std::string DemoRankPath() { return BuiltOr("CKPT_DEMO_RANK", CKPT_TEST_DEMO_RANK_PATH); }
std::string CkptctlPath() { return BuiltOr("CKPTCTL", CKPT_TEST_CKPTCTL_PATH); }

TestDaemon::TestDaemon() {
  char pattern[] = "/tmp/ckpt-test-XXXXXX";
  dir_ = mkdtemp(pattern);
}

TestDaemon::~TestDaemon() {
  process_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::Status TestDaemon::Start(const std::vector<std::string>& extra_flags) {
  std::vector<std::string> argv = {CkptdPath(),
                                   "--storage_root=" + root(),
                                   "--socket_path=" + socket(),
                                   "--pool_bytes=" + std::to_string(256 << 20),
                                   "--chunk_bytes=65536",
                                   "--writer_threads=2",
                                   "--host_name=testhost",
                                   "--plan_timeout_s=30",
                                   "--snapshot_timeout_s=30"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv);
  if (!p.ok()) return p.status();
  process_ = std::move(*p);
  if (!process_->WaitForOutput("ckptd: serving", absl::Seconds(30))) {
    ExitInfo info = process_->Wait();
    return absl::InternalError(absl::StrCat("ckptd did not start: ", info.output));
  }
  return absl::OkStatus();
}

absl::Status TestDaemon::StartWithTcp(const std::vector<std::string>& extra_flags) {
  absl::Status status = absl::UnavailableError("no free TCP port");
  // Another process may take the port between our probe and the daemon's
  // bind: try a few.
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int port = FreeTcpPort();
    if (port == 0) continue;
    std::vector<std::string> flags = extra_flags;
    tcp_address_ = absl::StrCat("127.0.0.1:", port);
    flags.push_back("--listen_address=" + tcp_address_);
    if (absl::Status s = MakeTlsFiles(); !s.ok()) return s;
    flags.insert(flags.begin(),
                 {"--tls_cert_file=" + tls_cert_file(), "--tls_key_file=" + tls_key_file(),
                  "--token_file=" + token_file(), "--read_token_file=" + read_token_file()});
    status = Start(flags);
    if (status.ok()) return status;
    tcp_address_.clear();
  }
  return status;
}

ExitInfo TestDaemon::Kill() {
  if (!process_) return {};
  process_->Signal(SIGKILL);
  return process_->Wait();
}

ExitInfo TestDaemon::WaitExit() {
  if (!process_) return {};
  return process_->Wait();
}

void TestDaemon::Signal(int sig) {
  if (process_) process_->Signal(sig);
}

std::optional<ExitInfo> TestDaemon::WaitExitFor(absl::Duration timeout) {
  if (!process_) return ExitInfo{};
  return process_->WaitFor(timeout);
}

std::unique_ptr<v1::NodeService::Stub> TestDaemon::Stub() const {
  return v1::NodeService::NewStub(
      grpc::CreateChannel("unix:" + socket(), grpc::InsecureChannelCredentials()));
}

v1::GetStatusResponse TestDaemon::Status() const {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetStatusResponse status;
  const grpc::Status s = Stub()->GetStatus(&context, v1::GetStatusRequest(), &status);
  INFO("GetStatus: " << s.error_message());
  REQUIRE(s.ok());
  return status;
}

std::vector<std::string> TestDaemon::RankArgv(const std::string& job, const std::string& mode,
                                              int rank, int world, int64_t step, int saved_world,
                                              int scale,
                                              const std::vector<std::string>& extra_flags) const {
  std::vector<std::string> argv = {DemoRankPath(),
                                   "--socket=" + socket(),
                                   "--job=" + job,
                                   "--mode=" + mode,
                                   absl::StrCat("--rank=", rank),
                                   absl::StrCat("--world=", world),
                                   absl::StrCat("--step=", step),
                                   absl::StrCat("--saved_world=", saved_world),
                                   absl::StrCat("--scale=", scale)};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  return argv;
}

std::unique_ptr<Subprocess> TestDaemon::StartRank(
    const std::string& job, const std::string& mode, int rank, int world, int64_t step,
    int saved_world, int scale, const std::vector<std::string>& extra_flags) const {
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start(RankArgv(job, mode, rank, world, step, saved_world, scale, extra_flags));
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  return std::move(*p);
}

absl::Status TestDaemon::MakeTlsFiles() {
  if (tls_files_made_) return absl::OkStatus();
  std::filesystem::create_directories(dir_ + "/tls");
  // A throwaway self-signed certificate for the loopback address.
  absl::StatusOr<std::unique_ptr<Subprocess>> openssl =
      Subprocess::Start({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                         "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", tls_key_file(),
                         "-out", tls_cert_file(), "-days", "2", "-subj", "/CN=localhost", "-addext",
                         "subjectAltName=IP:127.0.0.1,DNS:localhost"});
  if (!openssl.ok()) return openssl.status();
  const ExitInfo made = (*openssl)->Wait();
  if (!made.ok()) {
    return absl::InternalError(absl::StrCat("openssl could not make a certificate: ", made.output));
  }
  std::mt19937_64 rng{std::random_device{}()};
  for (const std::string& path : {token_file(), read_token_file()}) {
    std::ofstream(path) << absl::StrFormat("%016x%016x\n", rng(), rng());
    std::filesystem::permissions(
        path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  tls_files_made_ = true;
  return absl::OkStatus();
}

std::string TestDaemon::ReadToken(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  return token;
}

std::shared_ptr<grpc::ChannelCredentials> TestDaemon::CredentialsFor(
    const std::string& target, const std::string& token) const {
  if (absl::StartsWith(target, "unix:")) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  std::ifstream cert(tls_cert_file());
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(cert), std::istreambuf_iterator<char>());
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(ssl);
  if (token == "none") return credentials;
  return grpc::CompositeChannelCredentials(
      credentials, grpc::AccessTokenCredentials(token.empty() ? ReadToken(token_file()) : token));
}

std::unique_ptr<v1::NodeService::Stub> TestDaemon::StubFor(const std::string& target,
                                                           const std::string& token) const {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(256 << 20);
  args.SetMaxReceiveMessageSize(256 << 20);
  return v1::NodeService::NewStub(
      grpc::CreateCustomChannel(target, CredentialsFor(target, token), args));
}

std::unique_ptr<v1::NodeService::Stub> TestDaemon::PlaintextStubFor(const std::string& target) {
  return v1::NodeService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
}

std::vector<ExitInfo> TestDaemon::RunRanks(const std::string& job, const std::string& mode,
                                           int world, int64_t step, int scale, int saved_world,
                                           const std::vector<std::string>& extra_flags) const {
  std::vector<std::unique_ptr<Subprocess>> ranks;
  std::vector<ExitInfo> out(world);
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<std::unique_ptr<Subprocess>> p =
        Subprocess::Start(RankArgv(job, mode, r, world, step, saved_world, scale, extra_flags));
    if (!p.ok()) {
      out[r].output = p.status().ToString();
      ranks.emplace_back();
      continue;
    }
    ranks.push_back(std::move(*p));
  }
  for (int r = 0; r < world; ++r) {
    if (ranks[r]) out[r] = ranks[r]->Wait();
  }
  return out;
}

ExitInfo TestDaemon::Ckptctl(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {CkptctlPath(), "--socket=" + socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

std::vector<int64_t> ListedSteps(const TestDaemon& d, const std::string& job) {
  grpc::ClientContext context;
  v1::ListCheckpointsRequest request;
  request.set_job(job);
  v1::ListCheckpointsResponse response;
  const grpc::Status status = d.Stub()->ListCheckpoints(&context, request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  std::vector<int64_t> steps;
  for (const v1::CheckpointSummary& c : response.checkpoints()) {
    INFO("step " << c.step() << ": " << c.broken_reason());
    CHECK_FALSE(c.broken());
    steps.push_back(c.step());
  }
  return steps;
}

uint64_t CheckpointBytes(const TestDaemon& d, const std::string& job, int64_t step) {
  grpc::ClientContext context;
  v1::ListCheckpointsRequest request;
  request.set_job(job);
  v1::ListCheckpointsResponse response;
  REQUIRE(d.Stub()->ListCheckpoints(&context, request, &response).ok());
  for (const v1::CheckpointSummary& c : response.checkpoints()) {
    if (c.step() == step) return c.bytes();
  }
  FAIL("step " << step << " is not listed");
  return 0;
}

void SaveStep(const TestDaemon& d, const std::string& job, int64_t step) {
  for (const ExitInfo& r : d.RunRanks(job, "save", 1, step, 1)) {
    INFO(r.output);
    REQUIRE(r.ok());
  }
}

v1::CheckpointManifest InspectManifest(const TestDaemon& d, const std::string& job, int64_t step) {
  grpc::ClientContext context;
  v1::InspectCheckpointRequest request;
  request.set_job(job);
  request.set_step(step);
  v1::InspectCheckpointResponse response;
  const grpc::Status status = d.Stub()->InspectCheckpoint(&context, request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  return response.manifest();
}

std::unique_ptr<Client> AttachRank(const TestDaemon& d, const std::string& job, int rank,
                                   int world) {
  ClientOptions options;
  options.socket_path = d.socket();
  options.job = job;
  options.rank = rank;
  options.local_rank = rank;
  options.world_size = world;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Attach(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  return std::move(*client);
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ckpt::testing
