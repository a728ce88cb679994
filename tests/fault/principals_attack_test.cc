// Attacks on principals, ownership and per-principal limits (issue 29), as
// a hostile raw-gRPC client and as other local users would make them.
// The first two were holes when written (supplementary groups read from a
// reused pid's /proc; a job's claim dropped while its owner still had a
// rank between claim and session) and fail on the code before their fixes.
#include <fcntl.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/create_channel_posix.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tests/catch.h"
#include "tests/catch_skip.h"
#include "tests/support/local_user.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

using grpc::StatusCode;

constexpr char kTrainerToken[] = "trainer-token-0a9f8e7d6c5b4a39";
constexpr char kMalloryToken[] = "mallory-token-31415926535897932";
constexpr char kDashToken[] = "dash-token-2718281828459045235";
constexpr char kOpsToken[] = "ops-token-1618033988749894848";

std::string WriteTokensFile(const TestDaemon& d) {
  const std::string path = d.dir() + "/tls/tokens";
  std::ofstream(path) << "trainer use " << kTrainerToken << "\n"
                      << "mallory use " << kMalloryToken << "\n"
                      << "dash read " << kDashToken << "\n"
                      << "ops read,admin " << kOpsToken << "\n";
  chmod(path.c_str(), 0600);
  return path;
}

void Expect(const grpc::Status& s, StatusCode code, const std::string& what) {
  INFO(what << ": " << s.error_code() << " " << s.error_message());
  CHECK(s.error_code() == code);
}

grpc::Status Adopt(NodeStub& stub, const std::string& job, const std::string& owner, bool replace) {
  v1::AdoptJobRequest request;
  request.set_job(job);
  request.set_owner(owner);
  request.set_replace(replace);
  v1::AdoptJobResponse response;
  return Rpc([&](grpc::ClientContext* c) { return stub.AdoptJob(c, request, &response); });
}

std::string OwnerRecord(const TestDaemon& d, const std::string& job) {
  std::ifstream in(d.job_dir(job) + "/OWNER");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

// A Unix socket connected to `path` by a child process running as
// uid/gid, which then exits: the daemon's SO_PEERCRED names that child's
// pid, now free. Returns the socket and (in *pid) the dead child's pid.
int ConnectFromDeadChild(const std::string& path, uid_t uid, gid_t gid, pid_t* pid) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Raw syscalls only: the parent has threads.
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setgid, gid) != 0 ||
        syscall(SYS_setuid, uid) != 0) {
      _exit(2);
    }
    _exit(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : 3);
  }
  int wstatus = 0;
  REQUIRE(waitpid(child, &wstatus, 0) == child);
  REQUIRE(WIFEXITED(wstatus));
  REQUIRE(WEXITSTATUS(wstatus) == 0);
  *pid = child;
  return fd;
}

// Starts `argv` so that it gets pid `pid` (root: /proc/sys/kernel/ns_last_pid),
// trying a few times; null when another process kept taking it.
std::unique_ptr<Subprocess> StartAtPid(pid_t pid, const std::vector<std::string>& argv) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    {
      std::ofstream last("/proc/sys/kernel/ns_last_pid");
      last << (pid - 1);
    }
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv);
    if (p.ok() && (*p)->pid() == pid) return std::move(*p);
  }
  return nullptr;
}

TEST_CASE("a caller's supplementary groups are its own, not those of a later process on its pid",
          "[principals_attack]") {
  if (geteuid() != 0) {
    SkipTestCase("needs root to create users and choose pids");
    return;
  }
  const std::string suffix = std::to_string(getpid() % 100000);
  LocalUser alice("ckpta" + suffix);                  // may use ckptd (attach its own jobs)
  LocalUser bob("ckptb" + suffix, "ckptg" + suffix);  // an admin, through its group
  TestDaemon d;
  std::filesystem::permissions(d.dir(), std::filesystem::perms(0755));
  REQUIRE(d.Start({"--allow_users=" + alice.name(), "--admin_groups=ckptg" + suffix}).ok());
  REQUIRE(d.RunRanks("rootjob", "save", 1, 5, 1)[0].ok());
  REQUIRE(OwnerRecord(d, "rootjob") == "uid 0\n");

  // Alice connects from a child that exits at once; her connection stays.
  pid_t dead = 0;
  const int fd = ConnectFromDeadChild(d.socket(), alice.uid(), alice.gid(), &dead);
  auto stub = v1::NodeService::NewStub(grpc::CreateInsecureChannelFromFd("ckptd", fd));
  // Alice is no admin: refused.
  Expect(Adopt(*stub, "rootjob", "user:" + alice.name(), true), StatusCode::PERMISSION_DENIED,
         "alice adopting root's job");
  // A process of one of the admin group's members comes to hold her pid.
  std::unique_ptr<Subprocess> squatter =
      StartAtPid(dead, bob.As({"/bin/sh", "-c", "echo ready; exec /bin/sleep 300"}));
  if (squatter == nullptr) {
    SkipTestCase("could not place a process at the freed pid");
    return;
  }
  // Running as bob (with his groups) by now, not as root still.
  REQUIRE(squatter->WaitForOutput("ready", absl::Seconds(30)));
  // Still alice, still no admin: her permissions are not bob's.
  const grpc::Status s = Adopt(*stub, "rootjob", "user:" + alice.name(), true);
  Expect(s, StatusCode::PERMISSION_DENIED, "alice adopting root's job once bob holds her pid");
  CHECK(OwnerRecord(d, "rootjob") == "uid 0\n");
  CHECK(d.Running());
}

TEST_CASE("a job's claim is never dropped while its owner still has ranks attached",
          "[principals_attack]") {
  TestDaemon d;
  REQUIRE(d.MakeTlsFiles().ok());
  REQUIRE(
      d.StartWithTcp({"--tokens_file=" + WriteTokensFile(d), "--session_watch_grace_s=600"}).ok());
  // The owner (root, over the Unix socket) restarts its ranks again and
  // again: rank 0 and rank 1 attach and detach, each in its own thread.
  // Whenever one of them holds a session, mallory tries to join the job.
  auto owner = d.Stub();
  auto mallory = d.StubFor(d.tcp_address(), kMalloryToken);
  const std::string job = "racejob";
  std::atomic<bool> joined{false};
  std::atomic<int> attaches{0};
  std::string how, kept_session;
  int kept_rank = -1;
  absl::Mutex how_mu;
  auto churn = [&](int rank) {
    for (int i = 0; i < 3000 && !joined.load(); ++i) {
      v1::AttachResponse mine;
      if (!AttachRaw(*owner, job, rank, 2, &mine).ok()) continue;
      attaches.fetch_add(1);
      v1::AttachResponse theirs;
      if (AttachRaw(*mallory, job, 1 - rank, 2, &theirs).ok()) {
        joined.store(true);
        absl::MutexLock lock(&how_mu);
        how = absl::StrCat("after ", attaches.load(), " owner attaches, mallory joined while rank ",
                           rank, " of the owner was attached");
        (void)DetachRaw(*mallory, theirs.session_id());
        kept_session = mine.session_id();  // the owner's rank stays
        kept_rank = rank;
        return;
      }
      (void)DetachRaw(*owner, mine.session_id());
    }
  };
  std::thread a(churn, 0), b(churn, 1);
  a.join();
  b.join();
  INFO(how);
  std::printf("claim race: %d owner attaches, mallory joined: %d\n", attaches.load(),
              joined.load() ? 1 : 0);
  CHECK_FALSE(joined.load());
  if (joined.load()) {
    // What it costs the owner: its own next rank is refused (the job is
    // "mallory's" now), and its save records mallory as the job's owner.
    v1::AttachResponse other;
    const grpc::Status refused = AttachRaw(*owner, job, 1 - kept_rank, 2, &other);
    INFO(refused.error_message());
    CHECK(refused.ok());
    grpc::Status plan_status;
    std::thread planner([&] {
      v1::PlanSaveResponse p;
      plan_status = Plan(*owner, kept_session, 1, {Whole("w", v1::FLOAT32, {16})}, &p);
    });
    (void)AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 1; });
    std::ifstream in(d.job_dir(job) + "/OWNER");
    std::string record;
    std::getline(in, record);
    std::printf("claim race: the owner's save recorded OWNER '%s'\n", record.c_str());
    CHECK(record == "uid 0");
    (void)DetachRaw(*owner, kept_session);
    planner.join();
  }
  CHECK(d.Running());
}

TEST_CASE("adopt refuses crafted owners and job names and records nothing for them",
          "[principals_attack]") {
  TestDaemon d;
  REQUIRE(d.MakeTlsFiles().ok());
  REQUIRE(d.StartWithTcp({"--tokens_file=" + WriteTokensFile(d)}).ok());
  REQUIRE(d.RunRanks("rootjob", "save", 1, 5, 1)[0].ok());
  auto ops = d.StubFor(d.tcp_address(), kOpsToken);
  auto trainer = d.StubFor(d.tcp_address(), kTrainerToken);
  auto dash = d.StubFor(d.tcp_address(), kDashToken);
  const int64_t rss_before = ProcStatusKb(d.pid(), "VmRSS");
  const std::vector<std::string> owners = {
      std::string(100000, 'a'),
      std::string(257, 'x'),
      "principal:" + std::string(65, 'p'),
      "principal:../x",
      "principal:.hidden",
      "principal:",
      "principal:ops\nuid 0",
      "principal:ops uid",
      "user:-1",
      "-1",
      "4294967295",
      "user:4294967295",
      "uid 0",
      "principal ops",
      "user:",
      "",
      std::string("principal:ops\0x", 15),
      "user:root\n",
      "user:nosuchuser-ckpt",
  };
  for (const std::string& owner : owners) {
    const grpc::Status s = Adopt(*ops, "rootjob", owner, true);
    INFO("owner '" << owner.substr(0, 40) << "' (" << owner.size() << " bytes): " << s.error_code()
                   << " " << s.error_message().substr(0, 200));
    CHECK_FALSE(s.ok());
    CHECK(OwnerRecord(d, "rootjob") == "uid 0\n");
  }
  for (const std::string& job :
       {std::string("../rootjob"), std::string("rootjob/../x"), std::string("."), std::string(".."),
        std::string(""), std::string("a\nb"), std::string(5000, 'j')}) {
    const grpc::Status s = Adopt(*ops, job, "principal:trainer", false);
    INFO("job '" << job.substr(0, 40) << "': " << s.error_message().substr(0, 200));
    CHECK(s.error_code() == StatusCode::INVALID_ARGUMENT);
  }
  CHECK_FALSE(std::filesystem::exists(d.dir() + "/x"));
  CHECK_FALSE(std::filesystem::exists(d.dir() + "/OWNER"));
  // Only admins adopt.
  Expect(Adopt(*trainer, "rootjob", "principal:trainer", true), StatusCode::PERMISSION_DENIED,
         "a use token adopting");
  Expect(Adopt(*dash, "rootjob", "principal:dash", true), StatusCode::PERMISSION_DENIED,
         "a read token adopting");
  // A valid adopt records exactly the principal's key.
  REQUIRE(Adopt(*ops, "rootjob", "principal:trainer", true).ok());
  CHECK(OwnerRecord(d, "rootjob") == "principal trainer\n");
  const int64_t rss_after = ProcStatusKb(d.pid(), "VmRSS");
  std::printf("rss adopt attacks before=%lld kB after=%lld kB growth=%lld kB\n",
              static_cast<long long>(rss_before), static_cast<long long>(rss_after),
              static_cast<long long>(rss_after - rss_before));
  CHECK(rss_after - rss_before < 64 * 1024);
  CHECK(d.Running());
}

TEST_CASE("a use token reaches none of another principal's jobs, sessions or saves",
          "[principals_attack]") {
  TestDaemon d;
  REQUIRE(d.MakeTlsFiles().ok());
  REQUIRE(
      d.StartWithTcp({"--tokens_file=" + WriteTokensFile(d), "--session_watch_grace_s=600"}).ok());
  auto trainer = d.StubFor(d.tcp_address(), kTrainerToken);
  auto mallory = d.StubFor(d.tcp_address(), kMalloryToken);
  auto dash = d.StubFor(d.tcp_address(), kDashToken);
  auto ops = d.StubFor(d.tcp_address(), kOpsToken);
  // The trainer's job: a save of rank 0 of 2, planned and waiting for rank 1.
  const std::string victim_session = AttachOk(*trainer, "trainer-secret-job", 0, 2);
  v1::PlanSaveResponse planned;
  grpc::Status plan_status;
  std::thread planner([&] {
    plan_status = Plan(*trainer, victim_session, 7, {Whole("w", v1::FLOAT32, {1024})}, &planned);
  });
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 1; }));
  const int64_t rss_before = ProcStatusKb(d.pid(), "VmRSS");
  const std::string mallory_session = AttachOk(*mallory, "mallory-job", 0, 1);
  const StatusCode denied = StatusCode::PERMISSION_DENIED;
  for (int round = 0; round < 50; ++round) {
    // Her status shows nothing of the trainer's job.
    v1::GetStatusResponse status;
    REQUIRE(Rpc([&](grpc::ClientContext* c) { return mallory->GetStatus(c, {}, &status); }).ok());
    CHECK(status.saves_size() == 0);
    CHECK_FALSE(absl::StrContains(status.DebugString(), "trainer-secret-job"));
    // The trainer's session is not hers.
    v1::PlanSaveResponse p;
    Expect(Plan(*mallory, victim_session, 8, {Whole("w", v1::FLOAT32, {4})}, &p), denied,
           "plan in the trainer's session");
    Expect(DetachRaw(*mallory, victim_session), denied, "detach the trainer's session");
    Expect(LoadRaw(*mallory, victim_session, -1, {}), denied, "load in the trainer's session");
    v1::WaitSaveRequest wait;
    wait.set_session_id(victim_session);
    v1::WaitSaveResponse waited;
    Expect(Rpc([&](grpc::ClientContext* c) { return mallory->WaitSave(c, wait, &waited); }), denied,
           "wait in the trainer's session");
    // Her own session with the trainer's job's save and load ids.
    for (const std::string& id : {planned.save_id(), std::string("x")}) {
      v1::NextSaveBatchRequest next;
      next.set_session_id(mallory_session);
      next.set_save_id(id);
      v1::SaveBatch batch;
      const grpc::Status s =
          Rpc([&](grpc::ClientContext* c) { return mallory->NextSaveBatch(c, next, &batch); });
      CHECK_FALSE(s.ok());
      v1::WaitSaveRequest w;
      w.set_session_id(mallory_session);
      w.set_save_id(id);
      CHECK_FALSE(
          Rpc([&](grpc::ClientContext* c) { return mallory->WaitSave(c, w, &waited); }).ok());
    }
    // And the operations on the trainer's job.
    v1::CancelSaveRequest cancel;
    cancel.set_job("trainer-secret-job");
    cancel.set_step(7);
    v1::CancelSaveResponse cancelled;
    Expect(Rpc([&](grpc::ClientContext* c) { return mallory->CancelSave(c, cancel, &cancelled); }),
           denied, "cancel the trainer's save");
    v1::CollectGarbageRequest gc;
    gc.set_job("trainer-secret-job");
    gc.set_keep_last(0);
    v1::CollectGarbageResponse collected;
    Expect(Rpc([&](grpc::ClientContext* c) { return mallory->CollectGarbage(c, gc, &collected); }),
           denied, "gc the trainer's job");
    v1::ListCheckpointsRequest list;
    list.set_job("trainer-secret-job");
    v1::ListCheckpointsResponse listed;
    Expect(Rpc([&](grpc::ClientContext* c) { return mallory->ListCheckpoints(c, list, &listed); }),
           denied, "list the trainer's job");
    v1::InspectCheckpointRequest inspect;
    inspect.set_job("trainer-secret-job");
    inspect.set_step(-1);
    v1::InspectCheckpointResponse inspected;
    Expect(Rpc([&](grpc::ClientContext* c) {
             return mallory->InspectCheckpoint(c, inspect, &inspected);
           }),
           denied, "inspect the trainer's job");
    v1::VerifyCheckpointRequest verify;
    verify.set_job("trainer-secret-job");
    verify.set_step(-1);
    v1::VerifyCheckpointResponse verified;
    Expect(Rpc([&](grpc::ClientContext* c) {
             return mallory->VerifyCheckpoint(c, verify, &verified);
           }),
           denied, "verify the trainer's job");
    v1::AttachResponse joined;
    Expect(AttachRaw(*mallory, "trainer-secret-job", 1, 2, &joined), denied,
           "attach the trainer's missing rank");
  }
  const int64_t rss_after = ProcStatusKb(d.pid(), "VmRSS");
  std::printf("rss cross-principal attacks before=%lld kB after=%lld kB growth=%lld kB\n",
              static_cast<long long>(rss_before), static_cast<long long>(rss_after),
              static_cast<long long>(rss_after - rss_before));
  CHECK(rss_after - rss_before < 64 * 1024);
  // A reader sees the job's save; the admin cancels it.
  v1::GetStatusResponse seen;
  REQUIRE(Rpc([&](grpc::ClientContext* c) { return dash->GetStatus(c, {}, &seen); }).ok());
  CHECK(absl::StrContains(seen.DebugString(), "trainer-secret-job"));
  v1::CancelSaveRequest cancel;
  cancel.set_job("trainer-secret-job");
  cancel.set_step(7);
  v1::CancelSaveResponse cancelled;
  Expect(Rpc([&](grpc::ClientContext* c) { return ops->CancelSave(c, cancel, &cancelled); }),
         StatusCode::OK, "the admin cancelling");
  planner.join();
  CHECK_FALSE(plan_status.ok());
  CHECK(d.Running());
}

TEST_CASE("per-principal limits hold when one principal races past them", "[principals_attack]") {
  TestDaemon d;
  REQUIRE(d.MakeTlsFiles().ok());
  REQUIRE(d.StartWithTcp({"--tokens_file=" + WriteTokensFile(d), "--principal_max_sessions=4",
                          "--principal_max_saves_in_flight=2", "--session_watch_grace_s=600"})
              .ok());
  auto trainer = d.StubFor(d.tcp_address(), kTrainerToken);
  auto mallory = d.StubFor(d.tcp_address(), kMalloryToken);

  SECTION("sessions: 32 attaches at once, exactly 4 get one") {
    std::atomic<int> ok{0}, exhausted{0};
    std::vector<std::string> sessions(32);
    std::vector<std::thread> threads;
    for (int i = 0; i < 32; ++i) {
      threads.emplace_back([&, i] {
        v1::AttachResponse r;
        const grpc::Status s = AttachRaw(*mallory, absl::StrCat("flood", i), 0, 1, &r);
        if (s.ok()) {
          ok.fetch_add(1);
          sessions[i] = r.session_id();
        } else if (s.error_code() == StatusCode::RESOURCE_EXHAUSTED) {
          exhausted.fetch_add(1);
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(ok.load() == 4);
    CHECK(exhausted.load() == 28);
    CHECK(d.Status().attached_ranks() == 4);
    // The other principal still gets its sessions.
    (void)AttachOk(*trainer, "trainerjob", 0, 1);
  }
  SECTION("saves in flight: 4 jobs plan at once, at most 2 are in flight") {
    std::vector<std::string> sessions;
    for (int i = 0; i < 4; ++i) sessions.push_back(AttachOk(*mallory, absl::StrCat("s", i), 0, 2));
    std::vector<grpc::Status> results(4);
    absl::Mutex mu;
    int returned = 0;
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] {
        v1::PlanSaveResponse p;
        results[i] = Plan(*mallory, sessions[i], 1, {Whole("w", v1::FLOAT32, {256})}, &p);
        absl::MutexLock lock(&mu);
        ++returned;
      });
    }
    {
      // The refused ones answer at once; the others wait for rank 1.
      absl::MutexLock lock(&mu);
      mu.AwaitWithTimeout(absl::Condition(
                              +[](int* n) { return *n >= 2; }, &returned),
                          absl::Seconds(60));
    }
    const v1::GetStatusResponse status = d.Status();
    CHECK(status.saves_size() <= 2);
    for (const std::string& s : sessions) (void)DetachRaw(*mallory, s);
    for (auto& t : threads) t.join();
    int exhausted = 0;
    for (const grpc::Status& s : results) {
      exhausted += s.error_code() == StatusCode::RESOURCE_EXHAUSTED ? 1 : 0;
    }
    CHECK(exhausted == 2);
  }
  CHECK(d.Running());
}

}  // namespace
}  // namespace ckpt::testing
