// The coordinators' election against a real etcd (Debian's etcd-server):
// one candidate leads at a time, a resignation or a lapsed lease hands the
// lead to another with a higher epoch, a watch follows every change, and a
// leader that cannot renew its lease stops leading within it. Three
// members: one lost changes nothing; quorum lost, nobody leads until it
// returns.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/cluster/etcd_client.h"
#include "daemon/cluster/leader_election.h"
#include "daemon/cluster/leader_watch.h"
#include "tests/catch.h"
#include "tests/support/etcd_server.h"

namespace ckpt::cluster {
namespace {

constexpr absl::Duration kTtl = absl::Seconds(2);

// Polls `done` until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time until = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

std::unique_ptr<EtcdClient> Client(const testing::TestEtcd& etcd) {
  absl::StatusOr<std::unique_ptr<EtcdClient>> c =
      EtcdClient::Create(EtcdClient::ParseEndpoints(etcd.endpoints()), absl::Seconds(2));
  REQUIRE(c.ok());
  return std::move(*c);
}

struct Events {
  absl::Mutex mu;
  std::vector<int64_t> elected;
  std::vector<std::string> deposed;
};

std::unique_ptr<LeaderElection> Candidate(EtcdClient& client, const std::string& address,
                                          Events* events, absl::Duration ttl = kTtl) {
  LeaderElectionOptions o;
  o.name = "/test/lead";
  o.address = address;
  o.lease_ttl = ttl;
  o.on_elected = [events](int64_t epoch) {
    absl::MutexLock lock(&events->mu);
    events->elected.push_back(epoch);
  };
  o.on_deposed = [events](const std::string& why) {
    absl::MutexLock lock(&events->mu);
    events->deposed.push_back(why);
  };
  absl::StatusOr<std::unique_ptr<LeaderElection>> e = LeaderElection::Start(client, std::move(o));
  REQUIRE(e.ok());
  return std::move(*e);
}

TEST_CASE("one candidate leads; a resignation hands over at once with a higher epoch",
          "[etcd][election]") {
  testing::TestEtcd etcd;
  REQUIRE(etcd.Start(1).ok());
  std::unique_ptr<EtcdClient> client = Client(etcd);
  Events a_events, b_events;
  std::unique_ptr<LeaderElection> a = Candidate(*client, "10.0.0.1:7000", &a_events);
  REQUIRE(Eventually([&] { return a->leading(); }));
  std::unique_ptr<LeaderElection> b = Candidate(*client, "10.0.0.2:7000", &b_events);

  // A watch sees a's address and epoch; b campaigns but does not lead.
  std::vector<CoordinatorLeader> seen;
  absl::Mutex seen_mu;
  LeaderWatch watch(*client,
                    {.name = "/test/lead",
                     .poll = absl::Milliseconds(50),
                     .on_change = [&](const CoordinatorLeader&, const CoordinatorLeader& now) {
                       absl::MutexLock lock(&seen_mu);
                       seen.push_back(now);
                     }});
  REQUIRE(Eventually([&] { return watch.leader().address == "10.0.0.1:7000"; }));
  CHECK(watch.leader().epoch == a->epoch());
  absl::StatusOr<std::vector<EtcdCandidate>> candidates = client->Candidates("/test/lead");
  REQUIRE(candidates.ok());
  REQUIRE(candidates->size() == 2);
  CHECK((*candidates)[0].value == "10.0.0.1:7000");
  CHECK((*candidates)[1].value == "10.0.0.2:7000");
  CHECK_FALSE(b->leading());
  CHECK(absl::IsFailedPrecondition(b->CheckLeading()));
  CHECK(b->CheckLeading().message().find("10.0.0.2:7000") != std::string::npos);

  const int64_t first = a->epoch();
  const absl::Time stopped = absl::Now();
  a->Stop();
  REQUIRE(Eventually([&] { return b->leading(); }));
  // Resigned, not lapsed: well within the lease.
  CHECK(absl::Now() - stopped < kTtl);
  CHECK(b->epoch() > first);
  REQUIRE(Eventually([&] { return watch.leader().address == "10.0.0.2:7000"; }));
  CHECK(watch.leader().epoch == b->epoch());
  CHECK(watch.highest_epoch() == b->epoch());
  {
    absl::MutexLock lock(&a_events.mu);
    CHECK(a_events.elected == std::vector<int64_t>{first});
    CHECK(a_events.deposed.empty());  // it resigned
  }
  absl::MutexLock lock(&b_events.mu);
  CHECK(b_events.elected == std::vector<int64_t>{b->epoch()});
}

TEST_CASE("a leader that cannot renew its lease stops leading within it; another takes over",
          "[etcd][election]") {
  testing::TestEtcd etcd;
  REQUIRE(etcd.Start(1).ok());
  std::unique_ptr<EtcdClient> client = Client(etcd);
  Events events;
  std::unique_ptr<LeaderElection> a = Candidate(*client, "10.0.0.1:7000", &events);
  REQUIRE(Eventually([&] { return a->leading(); }));
  const int64_t first = a->epoch();

  // etcd frozen: no renewal answers. The leader must stop believing it
  // leads before etcd would let the lease go (SIGCONT may expire it).
  etcd.Pause(0);
  const absl::Time paused = absl::Now();
  REQUIRE(Eventually([&] { return !a->leading(); }, absl::Seconds(10)));
  CHECK(absl::Now() - paused <= kTtl);
  CHECK(absl::IsFailedPrecondition(a->CheckLeading()));
  // Its term ends (a term never resumes after a gap), while etcd is frozen.
  REQUIRE(Eventually(
      [&] {
        absl::MutexLock lock(&events.mu);
        return !events.deposed.empty();
      },
      absl::Seconds(5)));
  etcd.Resume(0);
  // It was deposed (counted), campaigns again and leads a new term.
  REQUIRE(Eventually([&] { return a->leading() && a->epoch() > first; }));
  CHECK(a->leases_lost() == 1);
  CHECK(a->elections_won() == 2);
  absl::MutexLock lock(&events.mu);
  REQUIRE(events.deposed.size() == 1);
  CHECK(events.deposed[0].find("lease") != std::string::npos);
}

TEST_CASE("a candidate that dies without resigning is replaced once its lease lapses",
          "[etcd][election]") {
  testing::TestEtcd etcd;
  REQUIRE(etcd.Start(1).ok());
  std::unique_ptr<EtcdClient> client = Client(etcd);
  Events b_events;
  // a's client only: "dying" is its etcd connection gone with no resign.
  std::unique_ptr<EtcdClient> a_client = Client(etcd);
  absl::StatusOr<int64_t> lease = a_client->GrantLease(kTtl);
  REQUIRE(lease.ok());
  EtcdCancel never;
  absl::StatusOr<EtcdLeaderKey> key =
      a_client->Campaign("/test/lead", *lease, "10.0.0.1:7000", never);
  REQUIRE(key.ok());
  std::unique_ptr<LeaderElection> b = Candidate(*client, "10.0.0.2:7000", &b_events);
  // The lease is not renewed: b leads within about its TTL.
  const absl::Time start = absl::Now();
  REQUIRE(Eventually([&] { return b->leading(); }));
  CHECK(absl::Now() - start < kTtl + absl::Seconds(3));
  CHECK(b->epoch() > key->revision);
}

TEST_CASE("three members: one lost changes nothing; quorum lost, nobody leads until it returns",
          "[etcd][election][quorum]") {
  testing::TestEtcd etcd;
  REQUIRE(etcd.Start(3).ok());
  std::unique_ptr<EtcdClient> client = Client(etcd);
  Events events;
  // The default lease: the remaining members may need an election of their
  // own (about a second) before they answer.
  constexpr absl::Duration kDefaultTtl = absl::Seconds(5);
  std::unique_ptr<LeaderElection> a = Candidate(*client, "10.0.0.1:7000", &events, kDefaultTtl);
  REQUIRE(Eventually([&] { return a->leading(); }));
  const int64_t first = a->epoch();

  etcd.Kill(0);  // one of three: a quorum remains
  // Longer than the lease: renewals went to another member.
  const absl::Time until = absl::Now() + kDefaultTtl + absl::Seconds(1);
  while (absl::Now() < until) {
    REQUIRE(a->leading());
    absl::SleepFor(absl::Milliseconds(100));
  }
  CHECK(a->epoch() == first);
  std::vector<EtcdMemberHealth> health = client->Health();
  REQUIRE(health.size() == 3);
  CHECK_FALSE(health[0].ok);
  CHECK(health[1].ok);
  CHECK(health[2].ok);

  etcd.Kill(1);  // quorum lost
  // A raft leader left alone steps down after its election timeout, and
  // serves renewals until then: the lease's validity counts from there.
  // Waited for as the term's end (a deposition), not a moment of
  // !leading(): a renewal late under the lost quorum is such a moment too.
  REQUIRE(Eventually(
      [&] {
        absl::MutexLock lock(&events.mu);
        return !events.deposed.empty();
      },
      2 * kDefaultTtl));
  CHECK_FALSE(a->leading());
  health = client->Health();
  CHECK_FALSE(health[2].ok);  // alone, without a raft leader
  REQUIRE(etcd.Restart(0).ok());
  REQUIRE(etcd.Restart(1).ok());
  REQUIRE(Eventually([&] { return a->leading(); }, absl::Seconds(30)));
  CHECK(a->epoch() > first);
}

TEST_CASE("etcd endpoints are checked", "[etcd]") {
  CHECK(EtcdClient::ParseEndpoints("http://a:1, b:2/ ,") == std::vector<std::string>{"a:1", "b:2"});
  CHECK_FALSE(EtcdClient::Create({}, absl::Seconds(1)).ok());
  CHECK(EtcdClient::Create({"a"}, absl::Seconds(1)).status().message().find("'a'") !=
        std::string::npos);
  CHECK_FALSE(EtcdClient::Create({"a:0"}, absl::Seconds(1)).ok());
  CHECK_FALSE(EtcdClient::Create({"a:99999"}, absl::Seconds(1)).ok());
  CHECK(EtcdClient::Create({"a:2379", "b:2379"}, absl::Seconds(1)).ok());
}

}  // namespace
}  // namespace ckpt::cluster
