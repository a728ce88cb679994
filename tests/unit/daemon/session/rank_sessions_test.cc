#include "daemon/session/rank_sessions.h"

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/catch.h"

namespace ckpt::session {
namespace {

const auth::Principal kAlice = auth::Principal::LocalUser(1001);
const auth::Principal kBob = auth::Principal::LocalUser(1002);
const auth::Principal kOps = auth::Principal::Named("ops");

SessionLimits Limits(int per_principal, int total) {
  SessionLimits limits;
  limits.max_sessions = total;
  limits.max_sessions_per_principal = per_principal;
  return limits;
}

TEST_CASE("sessions are counted per principal before the global limit", "[sessions]") {
  RankSessions sessions(Limits(3, 5));
  std::vector<std::string> alices;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<RankSession> s = sessions.Attach("a" + std::to_string(i), 0, 1, 0, kAlice);
    REQUIRE(s.ok());
    alices.push_back(s->id);
  }
  const absl::StatusOr<RankSession> fourth = sessions.Attach("a3", 0, 1, 0, kAlice);
  CHECK(absl::IsResourceExhausted(fourth.status()));
  CHECK(fourth.status().message().find("--principal_max_sessions") != absl::string_view::npos);
  // Others still attach, up to the global limit.
  REQUIRE(sessions.Attach("b0", 0, 1, 0, kBob).ok());
  REQUIRE(sessions.Attach("o0", 0, 1, 0, kOps).ok());
  const absl::StatusOr<RankSession> full = sessions.Attach("b1", 0, 1, 0, kBob);
  CHECK(full.status().message().find("--max_sessions") != absl::string_view::npos);
  // A detach gives its principal's room back.
  REQUIRE(sessions.Detach(alices[0]).ok());
  CHECK(sessions.Attach("a3", 0, 1, 0, kAlice).ok());
}

TEST_CASE("the per-principal limit holds when many attach at once", "[sessions]") {
  RankSessions sessions(Limits(10, 1000));
  std::vector<std::thread> threads;
  std::vector<int> admitted(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        if (sessions.Attach("j" + std::to_string(t * 100 + i), 0, 1, 0, kAlice).ok()) {
          ++admitted[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int total = 0;
  for (int n : admitted) total += n;
  CHECK(total == 10);
  CHECK(sessions.attached() == 10);
}

TEST_CASE("session ids are unguessable: 128 random bits each, never repeated", "[sessions]") {
  RankSessions sessions(Limits(0, 4096));
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<RankSession> s = sessions.Attach("job", i % 8, 8, 0, kAlice);
    REQUIRE(s.ok());
    CHECK(s->id.size() == 32);
    ids.insert(s->id);
  }
  CHECK(ids.size() == 1000);
}

TEST_CASE("a session is stale once its process is gone or it never watched", "[sessions]") {
  SessionLimits limits = Limits(0, 100);
  limits.watch_grace = absl::Seconds(10);
  RankSessions sessions(limits);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  absl::StatusOr<RankSession> of_child = sessions.Attach("job", 0, 3, 0, kAlice, 0, child);
  absl::StatusOr<RankSession> of_self = sessions.Attach("job", 1, 3, 0, kAlice, 0, getpid());
  absl::StatusOr<RankSession> silent = sessions.Attach("job", 2, 3, 0, kOps);
  REQUIRE(of_child.ok());
  REQUIRE(of_self.ok());
  REQUIRE(silent.ok());
  sessions.Watched(of_child->id);
  sessions.Watched(of_self->id);
  const absl::Time now = absl::Now();
  CHECK(sessions.Stale(now).empty());
  kill(child, SIGKILL);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  // Processes are looked at once per interval.
  std::vector<RankSession> stale = sessions.Stale(now + RankSessions::kProcessCheckInterval);
  REQUIRE(stale.size() == 1);
  CHECK(stale[0].id == of_child->id);
  // The TCP session that never opened its Watch goes after the grace.
  stale = sessions.Stale(now + absl::Seconds(11));
  REQUIRE(stale.size() == 2);
  CHECK((stale[0].id == silent->id || stale[1].id == silent->id));
}

}  // namespace
}  // namespace ckpt::session
