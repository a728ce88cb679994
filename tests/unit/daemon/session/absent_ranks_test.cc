// The barrier's grace for ranks with no session, at chosen times.
#include "daemon/session/absent_ranks.h"

#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "tests/catch.h"

namespace ckpt::session {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);
const absl::Duration kGrace = absl::Seconds(10);

absl::Time At(double seconds) { return kStart + absl::Seconds(seconds); }

std::function<bool(int)> Arrived(std::set<int> ranks) {
  return [ranks](int r) { return ranks.count(r) > 0; };
}

TEST_CASE("a rank absent for the whole grace fails the barrier, named", "[rank_grace]") {
  AbsentRanks absent("j", 2, 2);
  CHECK(absent.Check(At(0), kGrace, {0}, Arrived({0})).ok());
  CHECK(absent.Check(At(9.9), kGrace, {0}, Arrived({0})).ok());
  const absl::Status s = absent.Check(At(10), kGrace, {0}, Arrived({0}));
  CHECK(absl::IsAborted(s));
  CHECK(absl::StrContains(s.message(), "rank 1 of job j has no session here"));
  CHECK(absl::StrContains(s.message(), "--rank_grace_s"));
}

TEST_CASE("a rank attached, or in the barrier, is not absent", "[rank_grace]") {
  AbsentRanks absent("j", 3, 3);
  // Rank 1 is attached and has not arrived; rank 2 arrived and its session
  // is gone since (RankGone's to report, not this).
  for (double t : {0.0, 10.0, 100.0}) {
    CHECK(absent.Check(At(t), kGrace, {0, 1}, Arrived({0, 2})).ok());
  }
}

TEST_CASE("the grace starts again for a rank that attached and went", "[rank_grace]") {
  AbsentRanks absent("j", 2, 2);
  CHECK(absent.Check(At(0), kGrace, {0}, Arrived({0})).ok());
  CHECK(absent.Check(At(8), kGrace, {0, 1}, Arrived({0})).ok());  // attached
  CHECK(absent.Check(At(9), kGrace, {0}, Arrived({0})).ok());     // gone again
  CHECK(absent.Check(At(18.9), kGrace, {0}, Arrived({0})).ok());
  CHECK(absl::IsAborted(absent.Check(At(19), kGrace, {0}, Arrived({0}))));
}

TEST_CASE("a large world with one rank here watches a bounded few", "[rank_grace]") {
  AbsentRanks absent("j", 65536, 65536);
  CHECK(absent.Check(At(0), kGrace, {0}, Arrived({0})).ok());
  const absl::Status s = absent.Check(At(10), kGrace, {0}, Arrived({0}));
  CHECK(absl::IsAborted(s));
  CHECK(absl::StrContains(s.message(), "rank 1 of job j"));
  // A rank beyond the watched ones starts its grace when it is watched.
  AbsentRanks late("j", 200, 200);
  std::vector<int> attached;
  for (int r = 0; r < 100; ++r) attached.push_back(r);
  std::vector<int> most = attached;
  for (int r = 100; r < 199; ++r) most.push_back(r);             // rank 199 absent
  CHECK(late.Check(At(0), kGrace, attached, Arrived({})).ok());  // watches 100..163
  CHECK(late.Check(At(5), kGrace, most, Arrived({})).ok());      // now 199, from 5 s
  CHECK(late.Check(At(14.9), kGrace, most, Arrived({})).ok());
  CHECK(absl::StrContains(late.Check(At(15), kGrace, most, Arrived({})).message(), "rank 199"));
}

TEST_CASE("spread over hosts, the ranks here are counted", "[rank_grace]") {
  // 4 of the job's 8 ranks are on this host; which, only those attached say.
  AbsentRanks absent("j", 8, 4);
  CHECK(absent.Check(At(0), kGrace, {4, 5, 6}, Arrived({4})).ok());
  CHECK(absent.Check(At(5), kGrace, {4, 5, 6, 7}, Arrived({4})).ok());  // all here
  CHECK(absent.Check(At(6), kGrace, {4, 5, 6}, Arrived({4})).ok());
  const absl::Status s = absent.Check(At(16), kGrace, {4, 5, 6}, Arrived({4}));
  CHECK(absl::IsAborted(s));
  CHECK(absl::StrContains(s.message(), "only 3 of the 4 ranks of job j on this host"));
}

}  // namespace
}  // namespace ckpt::session
