// Who may call ckptd, tried for real: TCP with and without TLS and tokens
// (every method), and other local users, created here with useradd, over
// the Unix socket (calls made by processes running as them, via setpriv).
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "proto/lib/segment_handover.h"
#include "tests/catch.h"
#include "tests/catch_skip.h"
#include "tests/support/http_get.h"
#include "tests/support/local_user.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

using grpc::StatusCode;
using NodeStub = v1::NodeService::Stub;

std::unique_ptr<grpc::ClientContext> Context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return c;
}

// One call of every unary method with an empty (valid) request, by name.
std::map<std::string, grpc::Status> CallEveryMethod(NodeStub& stub) {
  std::map<std::string, grpc::Status> out;
  {
    v1::AttachResponse r;
    out["Attach"] = stub.Attach(Context().get(), {}, &r);
  }
  {
    v1::DetachResponse r;
    out["Detach"] = stub.Detach(Context().get(), {}, &r);
  }
  {
    v1::PlanSaveResponse r;
    out["PlanSave"] = stub.PlanSave(Context().get(), {}, &r);
  }
  {
    v1::SaveBatch r;
    out["NextSaveBatch"] = stub.NextSaveBatch(Context().get(), {}, &r);
  }
  {
    v1::SubmitSnapshotResponse r;
    out["SubmitSnapshot"] = stub.SubmitSnapshot(Context().get(), {}, &r);
  }
  {
    v1::WaitSaveResponse r;
    out["WaitSave"] = stub.WaitSave(Context().get(), {}, &r);
  }
  {
    v1::LoadResponse r;
    out["Load"] = stub.Load(Context().get(), {}, &r);
  }
  {
    v1::LoadBatch r;
    out["NextLoadBatch"] = stub.NextLoadBatch(Context().get(), {}, &r);
  }
  {
    v1::GetStatusResponse r;
    out["GetStatus"] = stub.GetStatus(Context().get(), {}, &r);
  }
  {
    v1::ListCheckpointsResponse r;
    out["ListCheckpoints"] = stub.ListCheckpoints(Context().get(), {}, &r);
  }
  {
    v1::InspectCheckpointResponse r;
    out["InspectCheckpoint"] = stub.InspectCheckpoint(Context().get(), {}, &r);
  }
  {
    v1::VerifyCheckpointResponse r;
    out["VerifyCheckpoint"] = stub.VerifyCheckpoint(Context().get(), {}, &r);
  }
  {
    v1::CancelSaveResponse r;
    out["CancelSave"] = stub.CancelSave(Context().get(), {}, &r);
  }
  {
    v1::CollectGarbageResponse r;
    out["CollectGarbage"] = stub.CollectGarbage(Context().get(), {}, &r);
  }
  {
    auto context = Context();
    auto reader = stub.Watch(context.get(), v1::WatchRequest());
    v1::WatchEvent event;
    while (reader->Read(&event)) {
    }
    out["Watch"] = reader->Finish();
  }
  return out;
}

void RequireAllRefused(NodeStub& stub, StatusCode code, const std::string& says) {
  const auto results = CallEveryMethod(stub);
  REQUIRE(results.size() == 15);
  for (const auto& [method, status] : results) {
    INFO(method << ": " << status.error_code() << " " << status.error_message());
    CHECK(status.error_code() == code);
    CHECK(absl::StrContains(status.error_message(), says));
  }
}

TEST_CASE("TCP serves only TLS callers with a valid token, and read tokens only read", "[auth]") {
  TestDaemon d;
  REQUIRE(d.StartWithTcp().ok());
  const std::string target = d.tcp_address();

  SECTION("no token: every method is UNAUTHENTICATED") {
    RequireAllRefused(*d.StubFor(target, "none"), StatusCode::UNAUTHENTICATED, "bearer token");
  }
  SECTION("a wrong token: every method is UNAUTHENTICATED") {
    RequireAllRefused(*d.StubFor(target, "0123456789abcdef0123456789abcdef"),
                      StatusCode::UNAUTHENTICATED, "refused the bearer token");
  }
  SECTION("plaintext on the TLS port gets nowhere") {
    auto stub = TestDaemon::PlaintextStubFor(target);
    v1::GetStatusResponse r;
    const grpc::Status s = stub->GetStatus(Context().get(), {}, &r);
    INFO(s.error_message());
    CHECK(s.error_code() == StatusCode::UNAVAILABLE);
  }
  SECTION("the admin token works for everything") {
    auto stub = d.StubFor(target);
    v1::GetStatusResponse status;
    REQUIRE(stub->GetStatus(Context().get(), {}, &status).ok());
    CHECK(status.pool_bytes() > 0);
    v1::CancelSaveRequest cancel;
    cancel.set_job("nojob");
    cancel.set_step(1);
    v1::CancelSaveResponse r;
    // Allowed, and then nothing to cancel.
    CHECK(stub->CancelSave(Context().get(), cancel, &r).error_code() == StatusCode::NOT_FOUND);
  }
  SECTION("the read-only token reads but cannot cancel") {
    auto stub = d.StubFor(target, TestDaemon::ReadToken(d.read_token_file()));
    v1::GetStatusResponse status;
    REQUIRE(stub->GetStatus(Context().get(), {}, &status).ok());
    v1::CancelSaveRequest cancel;
    cancel.set_job("nojob");
    cancel.set_step(1);
    v1::CancelSaveResponse r;
    const grpc::Status s = stub->CancelSave(Context().get(), cancel, &r);
    INFO(s.error_message());
    CHECK(s.error_code() == StatusCode::PERMISSION_DENIED);
    CHECK(absl::StrContains(s.error_message(), "admin"));
  }
  SECTION("ckptctl over TCP needs the CA and the token") {
    const ExitInfo with =
        RunCommand({CkptctlPath(), "--address=" + target, "--tls-ca=" + d.tls_cert_file(),
                    "--token-file=" + d.token_file(), "status"});
    INFO(with.output);
    CHECK(with.ok());
    const ExitInfo without = RunCommand(
        {CkptctlPath(), "--address=" + target, "--tls-ca=" + d.tls_cert_file(), "status"});
    INFO(without.output);
    CHECK(without.exit_code == 1);
    CHECK(absl::StrContains(without.output, "UNAUTHENTICATED"));
  }
}

TEST_CASE("without TLS the TCP listener binds loopback only and refuses every call", "[auth]") {
  TestDaemon d;
  // Asked for every address, with a token but no certificate.
  REQUIRE(d.MakeTlsFiles().ok());
  const int port = FreeTcpPort();
  REQUIRE(
      d.Start({absl::StrCat("--listen_address=0.0.0.0:", port), "--token_file=" + d.token_file()})
          .ok());
  INFO(d.Output());
  CHECK(absl::StrContains(d.Output(), absl::StrCat("TCP bound to 127.0.0.1:", port, " only")));
  auto stub = TestDaemon::PlaintextStubFor(absl::StrCat("127.0.0.1:", port));
  RequireAllRefused(*stub, StatusCode::UNAUTHENTICATED, "without TLS");
}

std::map<std::string, int> ProbeCodes(const std::string& output) {
  std::map<std::string, int> codes;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::vector<absl::string_view> words = absl::StrSplit(line, absl::MaxSplits(' ', 2));
    int code = 0;
    if (words.size() >= 2 && absl::SimpleAtoi(words[1], &code)) codes[std::string(words[0])] = code;
  }
  return codes;
}

// The rest of the line after "<key> " in auth_probe's output.
std::string ProbeValue(const std::string& output, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::ConsumePrefix(&line, key + " ")) return std::string(line);
  }
  return "";
}

// "OFFSET:LENGTH OFFSET:LENGTH ..." as printed by the probe.
std::vector<std::pair<uint64_t, uint64_t>> SegmentRanges(const std::string& text) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (absl::string_view item : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(item, ':');
    uint64_t offset = 0, length = 0;
    if (absl::SimpleAtoi(parts.first, &offset) && absl::SimpleAtoi(parts.second, &length)) {
      out.emplace_back(offset, length);
    }
  }
  return out;
}

TEST_CASE("other local users: refused unless allow-listed, and never on another user's job",
          "[auth]") {
  if (geteuid() != 0) {
    SkipTestCase("needs root to create users");
    return;
  }
  const std::string suffix = std::to_string(getpid() % 100000);
  LocalUser user("ckptauth" + suffix, "ckptgrp" + suffix);
  TestDaemon d;
  // The other user must reach the socket's directory.
  std::filesystem::permissions(d.dir(), std::filesystem::perms(0755));

  SECTION("not allow-listed: the socket is closed to it") {
    REQUIRE(d.Start().ok());
    struct stat st {};
    REQUIRE(stat(d.socket().c_str(), &st) == 0);
    CHECK((st.st_mode & 0077) == 0);
    const ExitInfo status = user.Run({CkptctlPath(), "--socket=" + d.socket(), "status"});
    INFO(status.output);
    CHECK(status.exit_code == 3);  // unreachable: the kernel refused the connect
  }

  SECTION("allow-listed by group: its own jobs only") {
    REQUIRE(d.Start({"--allow_groups=ckptgrp" + suffix}).ok());
    // Root's job, committed, and a session of root's.
    const std::vector<ExitInfo> saved = d.RunRanks("rootjob", "save", 1, 5, 1);
    REQUIRE(saved[0].ok());
    auto stub = d.Stub();
    v1::AttachRequest attach;
    attach.set_job("rootjob");
    attach.set_rank(0);
    attach.set_world_size(1);
    v1::AttachResponse attached;
    REQUIRE(stub->Attach(Context().get(), attach, &attached).ok());

    const ExitInfo probe =
        user.Run({CKPT_TEST_AUTH_PROBE_PATH, d.socket(), attached.session_id(), "rootjob", "5"});
    INFO(probe.output);
    REQUIRE(probe.ok());
    const auto codes = ProbeCodes(probe.output);
    const int denied = static_cast<int>(StatusCode::PERMISSION_DENIED);
    CHECK(codes.at("attach_foreign_job") == denied);
    CHECK(codes.at("load_with_foreign_session") == denied);
    CHECK(codes.at("detach_foreign_session") == denied);
    CHECK(codes.at("list_foreign_job") == denied);
    CHECK(codes.at("inspect_foreign_job") == denied);
    CHECK(codes.at("cancel_foreign_job") == denied);
    CHECK(codes.at("gc_foreign_job") == denied);
    CHECK(codes.at("status") == 0);
    CHECK(codes.at("attach_own_job") == 0);
    CHECK(absl::StrContains(probe.output, "belongs to uid 0"));
    // An attach alone records nothing on storage (the owner is written at
    // the job's first save).
    CHECK_FALSE(std::filesystem::exists(d.job_dir("rootjob-mine")));
    // Root's session survived the attempts: it still loads.
    v1::LoadRequest load;
    load.set_session_id(attached.session_id());
    load.set_step(5);
    v1::LoadResponse loaded;
    const grpc::Status s = stub->Load(Context().get(), load, &loaded);
    INFO(s.error_message());
    CHECK(s.ok());

    // Root's staged bytes are not the other user's to read: no pool file
    // exists to open, root's session's segments are refused to it, and the
    // segments its own job was handed are none of root's job's.
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
      CHECK_FALSE(absl::StartsWith(entry.path().filename().string(), "ckptd"));
    }
    CHECK(codes.at("segments_foreign_session") == denied);
    CHECK(codes.at("own_save") == 0);
    CHECK(codes.at("own_load") == 0);
    CHECK(ProbeValue(probe.output, "own_load_exact") == "1");
    CHECK(codes.at("segments_own") == 0);
    const std::vector<std::pair<uint64_t, uint64_t>> theirs =
        SegmentRanges(ProbeValue(probe.output, "segments_own_ranges"));
    CHECK_FALSE(theirs.empty());
    absl::StatusOr<segments::SegmentTable> roots = segments::FetchSegmentTable(
        attached.segment_socket(), attached.session_id(), attached.pool_bytes(), absl::Seconds(10));
    REQUIRE(roots.ok());
    CHECK_FALSE(roots->segments.empty());  // rootjob saved: its segments stay with it
    for (const auto& segment : roots->segments) {
      for (const auto& [offset, length] : theirs) {
        INFO("root's segment at " << segment.range.offset << ", the user's at " << offset);
        CHECK((segment.range.offset + segment.range.length <= offset ||
               offset + length <= segment.range.offset));
      }
    }

    // And the job it saved is its own (its owner recorded): the user lists
    // it. (rootjob-mine was only attached: its claim goes with the probe's
    // session, and with it any owner.)
    const ExitInfo mine =
        user.Run({CkptctlPath(), "--socket=" + d.socket(), "list", "rootjob-own"});
    INFO(mine.output);
    CHECK(mine.ok());
  }

  SECTION("a read operator sees every job but cannot cancel") {
    REQUIRE(d.Start({"--read_users=" + user.name()}).ok());
    REQUIRE(d.RunRanks("rootjob", "save", 1, 5, 1)[0].ok());
    const ExitInfo list = user.Run({CkptctlPath(), "--socket=" + d.socket(), "list", "rootjob"});
    INFO(list.output);
    CHECK(list.ok());
    CHECK(absl::StrContains(list.output, "5"));
    const ExitInfo cancel =
        user.Run({CkptctlPath(), "--socket=" + d.socket(), "cancel", "rootjob", "6"});
    INFO(cancel.output);
    CHECK(cancel.exit_code == 1);
    CHECK(absl::StrContains(cancel.output, "PERMISSION_DENIED"));
  }
}

// Principals of a tokens file: a trainer that uses, a dashboard that
// reads, an operator that reads and administers.
constexpr char kTrainerToken[] = "trainer-token-7d1e0c44a9b2";
constexpr char kDashToken[] = "dash-token-51c0ffee9e3a1b";
constexpr char kOpsToken[] = "ops-token-a0b1c2d3e4f5a6b7";

std::string WriteTokensFile(const TestDaemon& d) {
  const std::string path = d.dir() + "/tls/tokens";
  std::ofstream(path) << "# name permissions token\n"
                      << "trainer use " << kTrainerToken << "\n"
                      << "dash read " << kDashToken << "\n"
                      << "ops read,admin " << kOpsToken << "\n";
  chmod(path.c_str(), 0600);
  return path;
}

grpc::Status AttachAs(NodeStub& stub, const std::string& job, std::string* session = nullptr,
                      int world = 1) {
  v1::AttachRequest request;
  request.set_job(job);
  request.set_rank(0);
  request.set_world_size(world);
  v1::AttachResponse response;
  grpc::Status s = stub.Attach(Context().get(), request, &response);
  if (session != nullptr) *session = response.session_id();
  return s;
}

grpc::Status ListAs(NodeStub& stub, const std::string& job) {
  v1::ListCheckpointsRequest request;
  request.set_job(job);
  v1::ListCheckpointsResponse response;
  return stub.ListCheckpoints(Context().get(), request, &response);
}

grpc::Status VerifyAs(NodeStub& stub, const std::string& job) {
  v1::VerifyCheckpointRequest request;
  request.set_job(job);
  request.set_step(-1);
  v1::VerifyCheckpointResponse response;
  return stub.VerifyCheckpoint(Context().get(), request, &response);
}

grpc::Status CancelAs(NodeStub& stub, const std::string& job) {
  v1::CancelSaveRequest request;
  request.set_job(job);
  request.set_step(99);
  v1::CancelSaveResponse response;
  return stub.CancelSave(Context().get(), request, &response);
}

grpc::Status GcAs(NodeStub& stub, const std::string& job) {
  v1::CollectGarbageRequest request;
  request.set_job(job);
  request.set_keep_last(1);
  request.set_dry_run(true);
  v1::CollectGarbageResponse response;
  return stub.CollectGarbage(Context().get(), request, &response);
}

grpc::Status AdoptAs(NodeStub& stub, const std::string& job, const std::string& owner,
                     bool replace = false) {
  v1::AdoptJobRequest request;
  request.set_job(job);
  request.set_owner(owner);
  request.set_replace(replace);
  v1::AdoptJobResponse response;
  return stub.AdoptJob(Context().get(), request, &response);
}

grpc::Status PlanAs(NodeStub& stub, const std::string& session) {
  v1::PlanSaveRequest request;
  request.set_session_id(session);
  request.set_step(1);
  v1::PlanSaveResponse response;
  return stub.PlanSave(Context().get(), request, &response);
}

void Expect(const grpc::Status& s, StatusCode code, const std::string& what) {
  INFO(what << ": " << s.error_code() << " " << s.error_message());
  CHECK(s.error_code() == code);
}

TEST_CASE("every TCP credential holds exactly its permissions and acts as its principal",
          "[auth][principals]") {
  TestDaemon d;
  REQUIRE(d.MakeTlsFiles().ok());
  REQUIRE(d.StartWithTcp({"--tokens_file=" + WriteTokensFile(d)}).ok());
  // A job of the daemon's own user (root here), committed over the Unix
  // socket, and one of its sessions.
  REQUIRE(d.RunRanks("rootjob", "save", 1, 5, 1)[0].ok());
  auto local = d.Stub();
  std::string root_session;
  REQUIRE(AttachAs(*local, "rootjob", &root_session).ok());
  const std::string tcp = d.tcp_address();
  auto trainer = d.StubFor(tcp, kTrainerToken);
  auto dash = d.StubFor(tcp, kDashToken);
  auto ops = d.StubFor(tcp, kOpsToken);
  auto legacy_read = d.StubFor(tcp, TestDaemon::ReadToken(d.read_token_file()));
  const StatusCode denied = StatusCode::PERMISSION_DENIED;
  const int64_t rss_before = ProcStatusKb(d.pid(), "VmRSS");

  SECTION("read tokens only read: status, list, inspect, verify; never attach or change") {
    for (NodeStub* reader : {dash.get(), legacy_read.get()}) {
      v1::GetStatusResponse status;
      Expect(reader->GetStatus(Context().get(), {}, &status), StatusCode::OK, "status");
      // Readers see every job's checkpoint cost.
      CHECK(std::any_of(status.job_costs().begin(), status.job_costs().end(),
                        [](const v1::JobCheckpointCost& c) { return c.job() == "rootjob"; }));
      Expect(ListAs(*reader, "rootjob"), StatusCode::OK, "list another's job");
      Expect(VerifyAs(*reader, "rootjob"), StatusCode::OK, "verify another's job");
      Expect(AttachAs(*reader, "rootjob"), denied, "attach another's job");
      Expect(AttachAs(*reader, "readerjob"), denied, "attach a new job");
      Expect(CancelAs(*reader, "rootjob"), denied, "cancel");
      Expect(GcAs(*reader, "rootjob"), denied, "gc");
      Expect(AdoptAs(*reader, "rootjob", "principal:dash", true), denied, "adopt");
      Expect(PlanAs(*reader, root_session), denied, "plan in root's session");
    }
  }
  SECTION("a use token never acts as the daemon's own user") {
    // Its status shows the daemon's totals, not root's job or its costs.
    v1::GetStatusResponse status;
    Expect(trainer->GetStatus(Context().get(), {}, &status), StatusCode::OK, "status");
    CHECK(std::none_of(status.job_costs().begin(), status.job_costs().end(),
                       [](const v1::JobCheckpointCost& c) { return c.job() == "rootjob"; }));
    Expect(AttachAs(*trainer, "rootjob"), denied, "attach the daemon user's job");
    Expect(ListAs(*trainer, "rootjob"), denied, "list the daemon user's job");
    Expect(VerifyAs(*trainer, "rootjob"), denied, "verify the daemon user's job");
    Expect(CancelAs(*trainer, "rootjob"), denied, "cancel the daemon user's save");
    Expect(GcAs(*trainer, "rootjob"), denied, "gc the daemon user's job");
    Expect(PlanAs(*trainer, root_session), denied, "plan in root's session");
    Expect(AdoptAs(*trainer, "rootjob", "principal:trainer", true), denied, "adopt");
    // Its own job is its own, and not root's nor another token's.
    std::string session;
    Expect(AttachAs(*trainer, "trainerjob", &session), StatusCode::OK, "attach its own job");
    CHECK(ListAs(*trainer, "trainerjob").error_code() != denied);  // nothing saved yet
    Expect(AttachAs(*ops, "trainerjob"), denied, "the admin token attaching the trainer's job");
    Expect(PlanAs(*ops, session), denied, "the admin token planning in the trainer's session");
    Expect(PlanAs(*dash, session), denied, "the read token planning in the trainer's session");
    const grpc::Status root_attach = AttachAs(*local, "trainerjob");
    Expect(root_attach, denied, "root attaching the trainer's job");
    CHECK(absl::StrContains(root_attach.error_message(), "principal 'trainer'"));
  }
  SECTION("an admin token cancels, gcs and adopts, but may not attach") {
    Expect(CancelAs(*ops, "rootjob"), StatusCode::NOT_FOUND, "cancel (allowed; nothing to cancel)");
    Expect(GcAs(*ops, "rootjob"), StatusCode::OK, "gc dry run");
    Expect(ListAs(*ops, "rootjob"), StatusCode::OK, "list");
    Expect(AttachAs(*ops, "opsjob"), denied, "attach");
    Expect(AdoptAs(*ops, "rootjob", "principal:ops"), StatusCode::FAILED_PRECONDITION,
           "adopt an owned job without --replace");
  }
  // Refusals cost the daemon nothing it keeps.
  const int64_t rss_after = ProcStatusKb(d.pid(), "VmRSS");
  std::printf("rss refused-credentials before=%lld kB after=%lld kB growth=%lld kB\n",
              static_cast<long long>(rss_before), static_cast<long long>(rss_after),
              static_cast<long long>(rss_after - rss_before));
  CHECK(rss_after - rss_before < 64 * 1024);
  // Whatever was tried, root's job is intact and loads bit-exact.
  REQUIRE(DetachRaw(*local, root_session).ok());
  const std::vector<ExitInfo> loaded = d.RunRanks("rootjob", "load", 1, 5, 1);
  INFO(loaded[0].output);
  CHECK(loaded[0].ok());
}

TEST_CASE("a job without an owner record is adopted by an admin, never by whoever comes first",
          "[auth][principals]") {
  if (geteuid() != 0) {
    SkipTestCase("needs root to create users");
    return;
  }
  const std::string suffix = std::to_string(getpid() % 100000);
  LocalUser user("ckptadopt" + suffix);
  TestDaemon d;
  std::filesystem::permissions(d.dir(), std::filesystem::perms(0755));
  REQUIRE(d.Start().ok());
  REQUIRE(d.RunRanks("legacy", "save", 1, 3, 1)[0].ok());
  d.Kill();
  // As a job saved before ownership existed: data, no record.
  REQUIRE(std::filesystem::remove(d.job_dir("legacy") + "/OWNER"));
  REQUIRE(d.Start({"--allow_users=" + user.name()}).ok());

  // Not the first comer's: neither the user's (attach, load) nor root's.
  const ExitInfo probe = user.Run({CKPT_TEST_AUTH_PROBE_PATH, "attach-only", d.socket(), "legacy"});
  INFO(probe.output);
  CHECK(absl::StrContains(probe.output, absl::StrCat("attach ", StatusCode::PERMISSION_DENIED)));
  CHECK(absl::StrContains(probe.output, "ckptctl adopt legacy"));
  auto local = d.Stub();
  Expect(AttachAs(*local, "legacy"), StatusCode::PERMISSION_DENIED, "root attaching");
  CHECK_FALSE(d.RunRanks("legacy", "load", 1, 3, 1)[0].ok());
  CHECK_FALSE(std::filesystem::exists(d.job_dir("legacy") + "/OWNER"));  // no claim recorded
  // Adopting needs admin.
  const ExitInfo refused =
      user.Run({CkptctlPath(), "--socket=" + d.socket(), "adopt", "legacy", user.name()});
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK(absl::StrContains(refused.output, "PERMISSION_DENIED"));
  // The admin gives it to the user: recorded at once, the user's from now.
  const ExitInfo adopted = d.Ckptctl({"adopt", "legacy", "user:" + user.name()});
  INFO(adopted.output);
  REQUIRE(adopted.ok());
  CHECK(absl::StrContains(adopted.output, absl::StrCat("uid ", user.uid())));
  std::ifstream record(d.job_dir("legacy") + "/OWNER");
  std::string text;
  std::getline(record, text);
  CHECK(text == absl::StrCat("uid ", user.uid()));
  Expect(AttachAs(*local, "legacy"), StatusCode::PERMISSION_DENIED, "root attaching after");
  const ExitInfo list = user.Run({CkptctlPath(), "--socket=" + d.socket(), "list", "legacy"});
  INFO(list.output);
  CHECK(list.ok());
  // Handed back to root, it loads bit-exact.
  REQUIRE(d.Ckptctl({"adopt", "--replace", "legacy", "0"}).ok());
  const std::vector<ExitInfo> loaded = d.RunRanks("legacy", "load", 1, 3, 1);
  INFO(loaded[0].output);
  CHECK(loaded[0].ok());
}

TEST_CASE("sessions are limited per principal first, and a rank gone before its Watch is reaped",
          "[auth][principals]") {
  TestDaemon d;
  REQUIRE(d.MakeTlsFiles().ok());
  REQUIRE(d.StartWithTcp({"--tokens_file=" + WriteTokensFile(d), "--principal_max_sessions=4",
                          "--max_sessions=16", "--session_watch_grace_s=600"})
              .ok());
  auto local = d.Stub();
  auto trainer = d.StubFor(d.tcp_address(), kTrainerToken);

  SECTION("one principal's flood leaves room for others") {
    std::vector<std::string> mine;
    for (int i = 0; i < 4; ++i) {
      std::string session;
      REQUIRE(AttachAs(*local, absl::StrCat("flood", i), &session).ok());
      mine.push_back(session);
    }
    const grpc::Status fifth = AttachAs(*local, "flood4");
    Expect(fifth, StatusCode::RESOURCE_EXHAUSTED, "a fifth session");
    CHECK(absl::StrContains(fifth.error_message(), "--principal_max_sessions"));
    std::string theirs;
    Expect(AttachAs(*trainer, "trainerjob", &theirs), StatusCode::OK, "another principal");
    // One of the flood's ends: room for exactly one more of its own.
    REQUIRE(DetachRaw(*local, mine.back()).ok());
    Expect(AttachAs(*local, "flood5"), StatusCode::OK, "after a detach");
  }
  SECTION("a rank SIGKILLed before it opened its Watch stream loses its session") {
    auto probe = Subprocess::Start({CKPT_TEST_AUTH_PROBE_PATH, "attach-only", d.socket(), "dead"});
    REQUIRE(probe.ok());
    REQUIRE((*probe)->WaitForOutput("attached ", absl::Seconds(30)));
    CHECK(d.Status().attached_ranks() == 1);
    (*probe)->Signal(SIGKILL);
    (void)(*probe)->Wait();
    // Gone within the reaper's rounds, not at ckptd's restart.
    CHECK(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.attached_ranks() == 0; }));
    // Its principal's count came back with it.
    for (int i = 0; i < 4; ++i) REQUIRE(AttachAs(*local, absl::StrCat("after", i)).ok());
  }
}

grpc::Status PlanOne(NodeStub& stub, const std::string& session, int64_t step) {
  v1::PlanSaveRequest request;
  request.set_session_id(session);
  request.set_step(step);
  *request.add_shards() = Whole("w", v1::FLOAT32, {256});
  v1::PlanSaveResponse response;
  auto context = Context();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return stub.PlanSave(context.get(), request, &response);
}

TEST_CASE("saves in flight are limited per principal over all its jobs", "[auth][principals]") {
  TestDaemon d;
  REQUIRE(d.MakeTlsFiles().ok());
  REQUIRE(d.StartWithTcp({"--tokens_file=" + WriteTokensFile(d),
                          "--principal_max_saves_in_flight=1", "--rank_grace_s=3"})
              .ok());
  auto local = d.Stub();
  auto trainer = d.StubFor(d.tcp_address(), kTrainerToken);
  // Root's first job: rank 0 of 2 plans and waits for rank 1 (never comes).
  std::string waiting;
  REQUIRE(AttachAs(*local, "first", &waiting, 2).ok());
  grpc::Status first;
  std::thread planner([&] { first = PlanOne(*local, waiting, 1); });
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 1; }));
  // Its second job's save is refused while that one is in flight...
  std::string second;
  REQUIRE(AttachAs(*local, "second", &second).ok());
  const grpc::Status refused = PlanOne(*local, second, 1);
  Expect(refused, StatusCode::RESOURCE_EXHAUSTED, "a second job's save");
  CHECK(absl::StrContains(refused.error_message(), "--principal_max_saves_in_flight"));
  // ...another principal's is not.
  std::string theirs;
  REQUIRE(AttachAs(*trainer, "theirs", &theirs).ok());
  CHECK(PlanOne(*trainer, theirs, 1).error_code() != StatusCode::RESOURCE_EXHAUSTED);
  planner.join();
  Expect(first, StatusCode::ABORTED, "the save whose rank 1 never came");
  // Once it failed, root saves again.
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 0; }));
  CHECK(d.RunRanks("second-real", "save", 1, 1, 1)[0].ok());
}

TEST_CASE("a session that never opens its Watch stream is reaped after the grace",
          "[auth][principals]") {
  TestDaemon d;
  REQUIRE(d.MakeTlsFiles().ok());
  REQUIRE(
      d.StartWithTcp({"--tokens_file=" + WriteTokensFile(d), "--session_watch_grace_s=1"}).ok());
  // Over TCP there is no process to watch: only the Watch stream tells.
  auto trainer = d.StubFor(d.tcp_address(), kTrainerToken);
  std::string session;
  REQUIRE(AttachAs(*trainer, "silent", &session).ok());
  CHECK(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.attached_ranks() == 0; }));
  Expect(PlanAs(*trainer, session), StatusCode::NOT_FOUND, "the reaped session");
}

TEST_CASE("sockets admit only allowed users at accept; a flood cannot push others out",
          "[auth][principals]") {
  if (geteuid() != 0) {
    SkipTestCase("needs root to create users");
    return;
  }
  const std::string suffix = std::to_string(getpid() % 100000);
  LocalUser allowed("ckptok" + suffix);
  LocalUser stranger("ckptno" + suffix);
  TestDaemon d;
  std::filesystem::permissions(d.dir(), std::filesystem::perms(0755));
  REQUIRE(d.Start({"--allow_users=" + allowed.name(), "--principal_max_connections=8"}).ok());
  // The lists name a user: the files are open (0666), the check is ours.
  const ExitInfo theirs = stranger.Run({CKPT_TEST_AUTH_PROBE_PATH, "segments", d.socket()});
  INFO(theirs.output);
  // Refused at accept: told so, or cut off before its request went out;
  // never served (which would say NOT_FOUND for the unknown session).
  const int their_code = ProbeCodes(theirs.output)["segments"];
  CHECK((their_code == static_cast<int>(StatusCode::PERMISSION_DENIED) ||
         their_code == static_cast<int>(StatusCode::UNAVAILABLE)));
  const ExitInfo ours = allowed.Run({CKPT_TEST_AUTH_PROBE_PATH, "segments", d.socket()});
  INFO(ours.output);
  CHECK(ProbeCodes(ours.output)["segments"] == static_cast<int>(StatusCode::NOT_FOUND));
  // The stranger's gRPC connection is closed before gRPC reads it.
  const ExitInfo status = stranger.Run({CkptctlPath(), "--socket=" + d.socket(), "status"});
  INFO(status.output);
  CHECK(status.exit_code == 3);
  CHECK(allowed.Run({CkptctlPath(), "--socket=" + d.socket(), "status"}).ok());

  // One user's connections beyond its limit are refused; others' are not.
  const int64_t rss_before = ProcStatusKb(d.pid(), "VmRSS");
  std::vector<std::unique_ptr<NodeStub>> held;
  int refused = 0;
  for (int i = 0; i < 12; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    auto stub = v1::NodeService::NewStub(
        grpc::CreateCustomChannel("unix:" + d.socket(), grpc::InsecureChannelCredentials(), args));
    v1::GetStatusResponse r;
    auto context = Context();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    if (!stub->GetStatus(context.get(), {}, &r).ok()) ++refused;
    held.push_back(std::move(stub));
  }
  CHECK(refused >= 12 - 8);
  const int64_t rss_after = ProcStatusKb(d.pid(), "VmRSS");
  std::printf("rss refused-connections before=%lld kB after=%lld kB growth=%lld kB\n",
              static_cast<long long>(rss_before), static_cast<long long>(rss_after),
              static_cast<long long>(rss_after - rss_before));
  CHECK(rss_after - rss_before < 64 * 1024);
  CHECK(allowed.Run({CkptctlPath(), "--socket=" + d.socket(), "status"}).ok());
  // The segment socket still serves the allowed user, flood or not.
  const ExitInfo again = allowed.Run({CKPT_TEST_AUTH_PROBE_PATH, "segments", d.socket()});
  CHECK(ProbeCodes(again.output)["segments"] == static_cast<int>(StatusCode::NOT_FOUND));
}

}  // namespace
}  // namespace ckpt::testing
