// Who may call ckptd, tried for real: TCP with and without TLS and tokens
// (every method), and other local users, created here with useradd, over
// the Unix socket (calls made by processes running as them, via setpriv).
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
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

// A local account made for the test and removed after it.
class LocalUser {
 public:
  explicit LocalUser(const std::string& name, const std::string& group = "") : name_(name) {
    if (!group.empty()) {
      group_ = group;
      RunCommand({"/usr/sbin/groupdel", group_});
      REQUIRE(RunCommand({"/usr/sbin/groupadd", group_}).ok());
    }
    RunCommand({"/usr/sbin/userdel", name_});  // left by a killed run
    std::vector<std::string> add = {"/usr/sbin/useradd", "--no-create-home", "--shell",
                                    "/usr/sbin/nologin"};
    if (!group_.empty()) add.insert(add.end(), {"-G", group_});
    add.push_back(name_);
    const ExitInfo made = RunCommand(add);
    INFO(made.output);
    REQUIRE(made.ok());
    passwd* entry = getpwnam(name_.c_str());
    REQUIRE(entry != nullptr);
    uid_ = entry->pw_uid;
    gid_ = entry->pw_gid;
  }
  ~LocalUser() {
    RunCommand({"/usr/sbin/userdel", name_});
    if (!group_.empty()) RunCommand({"/usr/sbin/groupdel", group_});
  }
  // argv run as this user, with its supplementary groups.
  ExitInfo Run(const std::vector<std::string>& argv) const {
    std::vector<std::string> full = {"/usr/bin/setpriv", absl::StrCat("--reuid=", uid_),
                                     absl::StrCat("--regid=", gid_), "--init-groups"};
    full.insert(full.end(), argv.begin(), argv.end());
    return RunCommand(full);
  }
  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }

 private:
  std::string name_;
  std::string group_;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

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

    // And the job it made is its own: root (an operator) sees it, the user
    // lists it.
    const ExitInfo mine =
        user.Run({CkptctlPath(), "--socket=" + d.socket(), "list", "rootjob-mine"});
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

}  // namespace
}  // namespace ckpt::testing
