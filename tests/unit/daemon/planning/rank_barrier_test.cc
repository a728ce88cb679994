// The barrier's bookkeeping (rank_barrier.h): what a save, a load and the
// coordinator's gathering decide from it, called with any times.
#include "daemon/planning/rank_barrier.h"

#include "tests/catch.h"

namespace ckpt::planning {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

TEST_CASE("a barrier completes on its last expected rank, once", "[rank_barrier]") {
  RankBarrier barrier(3, 3, kStart + absl::Seconds(10));
  CHECK(*barrier.Arrive(2) == false);
  CHECK(*barrier.Arrive(0) == false);
  CHECK(!barrier.complete());
  CHECK(*barrier.Arrive(1) == true);
  CHECK(barrier.complete());
  CHECK(barrier.Arrive(1).status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("a barrier refuses ranks outside the world and ranks twice", "[rank_barrier]") {
  RankBarrier barrier(4, 4, kStart);
  CHECK(barrier.Arrive(-1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(barrier.Arrive(4).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(barrier.Arrive(3).ok());
  CHECK(barrier.Arrive(3).status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(barrier.arrived() == 1);
}

TEST_CASE("a barrier names its missing ranks, lowest first, bounded", "[rank_barrier]") {
  RankBarrier barrier(65536, 65536, kStart);
  REQUIRE(barrier.Arrive(0).ok());
  REQUIRE(barrier.Arrive(2).ok());
  CHECK(barrier.MissingRanks(3) == std::vector<int>{1, 3, 4});
  CHECK(barrier.Missing(3) == "[1, 3, 4, ...]");
  RankBarrier small(3, 3, kStart);
  REQUIRE(small.Arrive(1).ok());
  CHECK(small.Missing() == "[0, 2]");
}

TEST_CASE("a spread job's barrier expects a count and looks only among candidates",
          "[rank_barrier]") {
  // Ranks 4 and 9 of a world of 16 belong here; which, only their sessions say.
  RankBarrier barrier(16, 2, kStart);
  const std::vector<int> here = {4, 9};
  REQUIRE(*barrier.Arrive(9) == false);
  CHECK(barrier.MissingRanks(16, &here) == std::vector<int>{4});
  CHECK(barrier.Missing(16, &here) == "[4]");
  const std::vector<int> none;
  CHECK(barrier.Missing(16, &none) == "[...]");
  CHECK(*barrier.Arrive(4) == true);
}

TEST_CASE("a barrier expires at its deadline only while gathering", "[rank_barrier]") {
  RankBarrier barrier(2, 2, kStart + absl::Seconds(5));
  CHECK(!barrier.Expired(kStart + absl::Seconds(4)));
  CHECK(barrier.Expired(kStart + absl::Seconds(5)));
  REQUIRE(barrier.Arrive(0).ok());
  REQUIRE(barrier.Arrive(1).ok());
  CHECK(!barrier.Expired(kStart + absl::Seconds(60)));
}

}  // namespace
}  // namespace ckpt::planning
